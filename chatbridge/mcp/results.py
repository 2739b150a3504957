"""What an MCP call returns when it ends, and what the database keeps of an ended call.

One place turns a session's end (its terminal event, or its row after a restart) into the
``CallToolResult`` every path returns: pushed, round trips, ``_respond`` and tasks alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, assert_never

import mcp_types as types

from chatbridge.calls.commitment import CommitmentNote
from chatbridge.calls.events import SessionEvent
from chatbridge.calls.outcome import (
    OUTCOME,
    Aborted,
    Cancelled,
    Completed,
    Declined,
    Denied,
    Failed,
    Outcome,
    RefusedAnswers,
    describe,
)
from chatbridge.calls.sessions import PluginSession
from chatbridge.mcp.errors import public_failure

__all__ = [
    "COMMITMENT_META",
    "CallStore",
    "StoredCall",
    "error_of",
    "final_result",
    "recorded_result",
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
    outcome: dict[str, Any] | None = None  # how it ended (``chatbridge.calls.outcome``)
    worker: str = ""  # the worker holding the call (its lease)


class CallStore(Protocol):
    """Where persisted calls are found after a restart (the ORM in production), and their
    lease: a stored call is resumed only by the worker that claimed it."""

    worker: str  # this process

    async def load(self, call_id: str) -> StoredCall | None: ...

    async def holder_elsewhere(self, call_id: str) -> str | None:
        """The other live worker holding the live call (its lease and that worker's heartbeat,
        read together); None if it has ended, is held here, or its holder is gone."""
        ...

    async def alive(self, worker: str) -> bool: ...

    async def claim(self, call_id: str, holder: str) -> bool:
        """Take the call over from ``holder`` (gone): True for exactly one claimant."""
        ...

    async def route(self, holder: str, message: dict[str, Any]) -> dict[str, Any] | None:
        """Have ``holder`` (alive) serve a 2026-07-28 retry of its call
        (``mcp/round_routing.py``): its reply, or None if it cannot be reached."""
        ...


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
    outcome: Outcome, commitment: Mapping[str, Any] | None = None
) -> types.CallToolResult:
    """The MCP result of an ended call, from its outcome (live, or on its row). A committed
    call (``.commits()``) says what became of its commitment: in words (a text block) and as
    data (``_meta["io.chatbridge/commitment"]``)."""
    result = _result(outcome)
    if commitment:
        note = CommitmentNote.from_dict(dict(commitment))
        said = note.text()
        if said:
            result.content.append(types.TextContent(type="text", text=said))
        result.meta = {**(result.meta or {}), COMMITMENT_META: note.to_dict()}
    return result


def _result(outcome: Outcome) -> types.CallToolResult:
    match outcome:
        case Completed() | Declined() | Cancelled():
            return result_of(outcome.result)
        case Failed(refused=RefusedAnswers()):  # written for the client: how often, and why
            return error_of(outcome.message)
        case Failed():
            return error_of(public_failure(outcome.error_type, outcome.message))
        case Denied():
            said = f": {outcome.reason}" if outcome.reason else "."
            return error_of(f"The user denied this tool call{said}")
        case Aborted(by="operator"):
            return error_of(f"An operator stopped this tool call: {describe(outcome)}")
        case Aborted(by="refused"):  # ModeNotDeclared: its text names what to declare
            return error_of(outcome.reason)
        case Aborted():
            return error_of(f"The tool call was aborted: {outcome.reason}")
        case _:
            assert_never(outcome)


def recorded_result(call: StoredCall) -> types.CallToolResult:
    """The MCP result of a call that ended on record."""
    assert call.outcome is not None, "only an ended call has a result"
    return final_result(OUTCOME.validate_python(call.outcome), call.commitment)


def terminal_result(session: PluginSession, event: SessionEvent) -> types.CallToolResult:
    """The MCP result of a session that ended here (``event``: its end)."""
    outcome = session.outcome
    if outcome is None:  # parked: the process goes away and the call is resumed elsewhere
        outcome = Aborted(by="server", reason="ended")
    commitment = getattr(event, "commitment", None)
    return final_result(outcome, commitment.to_dict() if commitment is not None else None)
