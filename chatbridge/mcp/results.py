"""What an MCP call returns when it ends, and what the database keeps of an ended call.

One place turns a session's end (its terminal event, or its row after a restart) into the
``CallToolResult`` every path returns: pushed, round trips, ``_respond`` and tasks alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import mcp_types as types

from chatbridge.core.approval import DENIED_BY
from chatbridge.core.commitment import CommitmentNote
from chatbridge.core.events import SessionEvent
from chatbridge.core.sessions import PluginSession
from chatbridge.mcp.errors import public_failure
from chatbridge.mcp.modes import REFUSED_BY

__all__ = [
    "COMMITMENT_META",
    "CallStore",
    "StoredCall",
    "error_of",
    "final_result",
    "result_of",
    "terminal_result",
]


@dataclass(frozen=True)
class StoredCall:
    """What the database keeps of a call: enough to resume it or repeat its result."""

    tool_name: str
    arguments: dict[str, Any]
    journal: list[dict[str, Any]]
    status: str
    result: Any
    error: str
    aborted_by: str = ""
    commitment: dict[str, Any] | None = None  # a request to stop it, what became of it
    committed: str = ""  # the key whose answer committed the call: never ended on record


class CallStore(Protocol):
    """Where persisted calls are found after a restart (the ORM in production)."""

    async def load(self, call_id: str) -> StoredCall | None: ...


COMMITMENT_META = "io.chatbridge/commitment"


def result_of(value: Any) -> types.CallToolResult:
    structured = value if isinstance(value, dict) else {"result": value}
    text = json.dumps(value, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def error_of(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


def final_result(
    status: Literal["completed", "failed", "aborted"] | str,
    result: Any,
    error: str,
    aborted_by: str = "",
    commitment: Mapping[str, Any] | None = None,
) -> types.CallToolResult:
    """The MCP result of an ended call, from its terminal event or its row. A committed call
    (``.commits()``) says what became of its commitment: in words (a text block) and as data
    (``_meta["io.chatbridge/commitment"]``)."""
    outcome = _outcome(status, result, error, aborted_by)
    if commitment:
        note = CommitmentNote.from_dict(dict(commitment))
        said = note.text()
        if said:
            outcome.content.append(types.TextContent(type="text", text=said))
        outcome.meta = {**(outcome.meta or {}), COMMITMENT_META: note.to_dict()}
    return outcome


def _outcome(status: str, result: Any, error: str, aborted_by: str) -> types.CallToolResult:
    if status == "completed":
        return result_of(result)
    if status == "failed":
        return error_of(public_failure(error))
    if aborted_by.startswith("operator"):
        return error_of(f"An operator stopped this tool call: {error}")
    if aborted_by == REFUSED_BY:  # ModeNotDeclared: its text names what to declare
        return error_of(error)
    if aborted_by == DENIED_BY:  # "Denied by the user: <reason>"
        return error_of(f"The user denied this tool call{error.removeprefix('Denied by the user')}")
    return error_of(f"The tool call was aborted: {error}")


def terminal_result(session: PluginSession, event: SessionEvent) -> types.CallToolResult:
    if event.type not in ("completed", "failed", "aborted"):
        return final_result("aborted", None, "ended", session.aborted_by or "")
    note = event.commitment.to_dict() if event.commitment is not None else None
    if event.type == "completed":
        return final_result("completed", event.result, "", commitment=note)
    if event.type == "failed":
        return final_result("failed", None, event.error, commitment=note)
    return final_result("aborted", None, event.reason, session.aborted_by or "", note)
