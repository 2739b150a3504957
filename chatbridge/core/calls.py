"""Running one tool call directly on a ``CapabilityHost`` (no session): for MCP serving."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from chatbridge.core.context import CallRuntime, CapabilityHost, ToolContext
from chatbridge.core.journal import Journal, JournalEntry, to_json_value
from chatbridge.core.tools import McpTool

__all__ = ["run_call"]


async def run_call(
    tool: McpTool[Any, Any],
    params: Mapping[str, Any] | BaseModel,
    *,
    call_id: str,
    host: CapabilityHost,
    journal: Journal | Iterable[JournalEntry | Mapping[str, Any]] = (),
) -> Any:
    """Validate ``params``, run the tool on ``host`` (replaying ``journal``), return its JSON."""
    validated = tool.validate_params(params)
    book = journal if isinstance(journal, Journal) else Journal(tool.name, journal)
    runtime = CallRuntime(tool, call_id, validated.model_dump(mode="json"), host, book)
    raw = await tool.fn(validated, ToolContext(runtime))
    return to_json_value(raw, f"The result of tool {tool.name!r}")
