"""What an MCP client sees when something is wrong: an unknown tool or resource, a tool that
fails, a question the client has no way to receive, a malformed _respond or requestState. The
server stays up and says why (the official client over the SDK's in-memory transport)."""

from __future__ import annotations

import enum
import logging
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from pydantic import BaseModel

from chatbridge import (
    ElicitKey,
    PluginRegistry,
    SessionManager,
    ToolContext,
    auto_form,
    create_mcp_tool,
    make_plugin,
)
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.mcp.server import McpBridge, McpSettings


class Name(BaseModel):
    name: str


NAME = ElicitKey("name", Name)


async def greet(params: Any, ctx: ToolContext) -> str:
    answer = await ctx.elicit(NAME, message="Your name?")
    return f"Hello, {answer.content.name}!" if answer.accepted else "Goodbye"


async def broken(params: Any, ctx: ToolContext) -> None:
    raise RuntimeError("database password is hunter2")


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Paint(BaseModel):
    colour: Colour
    extras: list[Colour] = []


PAINT = ElicitKey("paint", Paint)


async def paint(params: Any, ctx: ToolContext) -> list[str]:
    answer = await ctx.elicit(PAINT, message="Which colours?")
    assert answer.accepted and isinstance(answer.content.colour, Colour)
    return [answer.content.colour.name, *(c.name for c in answer.content.extras)]


def bridge() -> McpBridge:
    greet_tool = create_mcp_tool("greet").elicits(NAME).execute(greet)
    broken_tool = create_mcp_tool("broken").elicits().execute(broken)
    paint_tool = create_mcp_tool("paint").elicits(PAINT).execute(paint)
    registry = PluginRegistry(
        [
            make_plugin(greet_tool).on(NAME, auto_form).build(),
            make_plugin(broken_tool).build(),
            make_plugin(paint_tool).on(PAINT, auto_form).build(),
        ]
    )
    manager = SessionManager(sampler=LiteLLMSampler("offline/mcp"))
    return McpBridge(registry, manager, McpSettings(state_keys=[b"k" * 32]))


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_an_unknown_tool_is_invalid_params() -> None:
    async with Client(bridge().server, mode="legacy") as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("no_such_tool", {})
    assert info.value.error.code == types.INVALID_PARAMS
    assert info.value.error.message == "Unknown tool 'no_such_tool'."


async def test_a_failing_tool_is_an_error_result_that_keeps_its_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR):
        async with Client(bridge().server, mode="legacy") as client:
            result = await client.call_tool("broken", {})
            still = await client.list_tools()  # the server is still there
    assert result.is_error
    assert "hunter2" not in text_of(result)
    assert "hunter2" in caplog.text  # for the operator, in the log
    assert "greet" in {tool.name for tool in still.tools}


async def test_a_client_that_can_receive_no_question_is_told_how_to_fix_it() -> None:
    async with Client(bridge().server, mode="legacy") as client:  # no elicitation callback
        with pytest.warns(MCPDeprecationWarning):  # logging/setLevel: protocols up to 2025-11-25
            await client.set_logging_level("error")  # no notices, which questions travel as
        result = await client.call_tool("greet", {})
    assert result.is_error
    assert text_of(result).startswith(
        "Tool 'greet' asks the user questions, and this client can receive none"
    )


async def test_a_client_that_elicits_gets_the_question_and_its_flat_schema() -> None:
    schemas: list[dict[str, Any]] = []

    async def person(context: Any, params: Any) -> types.ElicitResult:
        schemas.append(params.requested_schema)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with Client(bridge().server, mode="legacy", elicitation_callback=person) as client:
        result = await client.call_tool("greet", {})
    assert result.structured_content == {"result": "Hello, Ada!"}
    assert schemas[0]["properties"] == {"name": {"title": "Name", "type": "string"}}
    assert schemas[0]["required"] == ["name"]


@pytest.mark.parametrize(("mode", "code"), [("legacy", -32002), ("2026-07-28", -32602)])
async def test_an_unknown_resource_is_refused_with_its_version_s_code(mode: str, code: int) -> None:
    async with Client(bridge().server, mode=mode) as client:
        with pytest.raises(MCPError) as info:
            await client.read_resource("ui://nothing-here")
    assert info.value.error.code == code
    assert info.value.error.data == {"uri": "ui://nothing-here"}


async def test_a_malformed_respond_and_request_state_are_invalid_params() -> None:
    async with Client(bridge().server, mode="legacy") as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("_respond", {"request_id": 7, "payload": {}})
    assert info.value.error.message == "_respond needs a string request_id."

    async def person(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with Client(bridge().server, mode="2026-07-28", elicitation_callback=person) as client:
        with pytest.raises(MCPError) as info:
            await client.session.call_tool(
                "greet", {}, allow_input_required=True, request_state="not-a-state"
            )
    assert (info.value.error.code, info.value.error.message) == (
        types.INVALID_PARAMS,
        "Invalid or expired requestState",
    )


async def test_enum_choices_are_offered_as_enums_and_reach_the_tool_as_members() -> None:
    schemas: list[dict[str, Any]] = []

    async def person(context: Any, params: Any) -> types.ElicitResult:
        schemas.append(params.requested_schema)
        return types.ElicitResult(action="accept", content={"colour": "blue", "extras": ["red"]})

    async with Client(bridge().server, mode="legacy", elicitation_callback=person) as client:
        result = await client.call_tool("paint", {})
    assert result.structured_content == {"result": ["BLUE", "RED"]}
    properties = schemas[0]["properties"]
    assert properties["colour"] == {"enum": ["red", "blue"], "title": "Colour", "type": "string"}
    assert properties["extras"]["items"] == {"enum": ["red", "blue"], "type": "string"}
