"""The pytest plugin django-chatbridge installs (its ``pytest11`` entry point): a test asks for
the ``run_tool`` fixture and runs a tool with it, importing nothing of chatbridge.testing."""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel

from chatbridge import ToolContext, create_mcp_tool


class Name(BaseModel):
    name: str


async def hello(params: Any, ctx: ToolContext) -> str:
    answer = await ctx.elicit("name", message="Your name?")
    return f"Hello, {answer.content.name}" if answer.accepted else "Hello"


hello_tool = create_mcp_tool("hello").elicits(name=Name).execute(hello)


def test_the_plugin_is_registered_with_pytest() -> None:
    [plugin] = [e for e in entry_points(group="pytest11") if e.name == "chatbridge"]
    assert plugin.value == "chatbridge.pytest_plugin"
    assert "chatbridge.pytest_plugin" in sys.modules  # pytest loaded it at start-up


async def test_a_tool_runs_with_the_fixture(run_tool: Any) -> None:
    run = await run_tool(hello_tool, answers={"name": {"name": "Ada"}})
    assert run.status == "completed" and run.result == "Hello, Ada"
    assert run.asked == ["name"]
