"""MCP 2026-07-28 round trips over a live ``PluginSession``: exactly once (DESIGN §6, §9).

The journal stays on the server. ``requestState`` (sealed by the SDK's boundary, bound to the
caller and the arguments, expiring) only names the call and the question it asked. A retry
takes the call's lock, then:

- the named question is still open: the answer goes to the session, which validates it and
  counts refused answers (an older state cannot reset that count);
- it was answered with the *same* answer: the same outcome again (the question now open, or
  the final result), and no step runs again;
- it was answered differently: a clear error result.

Between round trips the session stays live until its state expires; after a restart it is
resumed from its persisted journal by replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import mcp_types as types
from pydantic import BaseModel

from chatbridge.core.approval import APPROVAL_KEY, DENIED_BY, Approval
from chatbridge.core.elicit import ElicitId, ElicitRequest, result_to_dict, validate_result
from chatbridge.core.events import SessionEvent
from chatbridge.core.exceptions import ElicitValidationError
from chatbridge.core.manager import SessionManager
from chatbridge.core.sessions import PluginSession
from chatbridge.core.tools import McpTool
from chatbridge.mcp.errors import public_failure
from chatbridge.mcp.hosts import Channel, deliver, errors_text, from_wire, wire_request

__all__ = ["CallStore", "RoundState", "Rounds", "StoredCall", "final_result"]

logger = logging.getLogger("chatbridge.mcp")

Outcome = types.CallToolResult | types.InputRequiredResult


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


class CallStore(Protocol):
    """Where persisted calls are found after a restart (the ORM in production)."""

    async def load(self, call_id: str) -> StoredCall | None: ...


@dataclass(frozen=True)
class RoundState:
    """What ``requestState`` holds: which call, which question, whose."""

    call_id: str
    elicit_id: str
    caller: str

    def dump(self) -> str:
        data = {"call": self.call_id, "elicit": self.elicit_id, "caller": self.caller}
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def parse(cls, raw: str) -> RoundState:
        """``ValueError`` for anything this server did not mint."""
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("requestState is not an object")
        call, elicit, caller = (data.get(k) for k in ("call", "elicit", "caller"))
        if not (isinstance(call, str) and isinstance(elicit, str) and isinstance(caller, str)):
            raise ValueError("requestState lacks call, elicit or caller")
        return cls(call, elicit, caller)


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
) -> types.CallToolResult:
    """The MCP result of an ended call, from its terminal event or its row."""
    if status == "completed":
        return result_of(result)
    if status == "failed":
        return error_of(public_failure(error))
    if aborted_by.startswith("operator"):
        return error_of(f"An operator stopped this tool call: {error}")
    if aborted_by == DENIED_BY:  # "Denied by the user: <reason>"
        return error_of(f"The user denied this tool call{error.removeprefix('Denied by the user')}")
    return error_of(f"The tool call was aborted: {error}")


def _terminal_result(session: PluginSession, event: SessionEvent) -> types.CallToolResult:
    if event.type == "completed":
        return final_result("completed", event.result, "")
    if event.type == "failed":
        return final_result("failed", None, event.error)
    reason = event.reason if event.type == "aborted" else "ended"
    return final_result("aborted", None, reason, session.aborted_by or "")


@dataclass
class _Ended:
    journal: list[dict[str, Any]]
    result: types.CallToolResult
    expires: float


class Rounds:
    """The 2026-07-28 calls of one MCP server: live sessions driven one round at a time."""

    def __init__(
        self,
        manager: SessionManager,
        flat: Mapping[str, dict[str, dict[str, Any]]],
        ttl: float,
        store: CallStore | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.manager, self.flat, self.ttl, self.store = manager, flat, ttl, store
        self._clock = clock
        self._locks: dict[str, asyncio.Lock] = {}
        self._ended: dict[str, _Ended] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._aborts: set[asyncio.Task[None]] = set()
        self._progressed: dict[str, float] = {}  # the last progress sent, by live call

    async def start(
        self,
        tool: McpTool[Any, Any],
        arguments: dict[str, Any],
        call_id: str,
        caller: str,
        channel: Channel,
        meta: Mapping[str, str],
    ) -> Outcome:
        """The first round: start the session, run it to its first question or its end."""
        async with self._round(call_id):
            session = await self.manager.create(tool, arguments, call_id=call_id, meta=meta)
            return await self._advance(session, caller, channel)

    async def retry(
        self,
        tool: McpTool[Any, Any],
        arguments: dict[str, Any],
        state: RoundState,
        responses: Mapping[str, Any],
        channel: Channel,
        meta: Mapping[str, str],
    ) -> Outcome:
        """A retry naming ``state``'s question, with the client's ``inputResponses``."""
        async with self._round(state.call_id):
            return await self._retry(tool, arguments, state, responses, channel, meta)

    async def _retry(
        self,
        tool: McpTool[Any, Any],
        arguments: dict[str, Any],
        state: RoundState,
        responses: Mapping[str, Any],
        channel: Channel,
        meta: Mapping[str, str],
    ) -> Outcome:
        self._prune()
        call_id, caller = state.call_id, state.caller
        session = self.manager.get(call_id)
        ended = self._ended.get(call_id)
        if session is None and ended is None:
            stored = await self.store.load(call_id) if self.store is not None else None
            if stored is None:
                return error_of(
                    "This tool call is no longer known to the server (it expired); call the "
                    "tool again without requestState."
                )
            if stored.status in ("running", "awaiting_elicit", "awaiting_sample"):
                logger.info("resuming MCP call %s from its journal", call_id)
                session = await self.manager.create(
                    tool, stored.arguments, call_id=call_id, journal=stored.journal, meta=meta
                )
            else:
                result = final_result(stored.status, stored.result, stored.error, stored.aborted_by)
                ended = _Ended(stored.journal, result, self._clock() + self.ttl)
        if session is not None and session.pending is None and not session.finished:
            outcome = await self._advance(session, caller, channel)  # resumed: to its question
            if isinstance(outcome, types.CallToolResult):
                session, ended = None, self._ended.get(call_id)
        raw = responses.get(state.elicit_id)
        pending = session.pending if session is not None else None
        if session is not None and pending is not None and str(pending.id) == state.elicit_id:
            if raw is None:
                errors = session.pending_errors
                return self._input_required(pending, caller, errors_text(errors) if errors else "")
            note = await deliver(session, pending, _answer(raw))
            if note:
                return self._input_required(pending, caller, note)
            return await self._advance(session, caller, channel)
        journal = session.journal if session is not None else ended.journal if ended else []
        same = self._same_answer(tool, journal, state.elicit_id, raw)
        if same is not None:
            return error_of(same)
        if session is not None and pending is not None:
            return self._input_required(pending, caller, "")
        if session is not None:  # between questions: drive on to the next one
            return await self._advance(session, caller, channel)
        assert ended is not None
        return ended.result

    def _same_answer(
        self, tool: McpTool[Any, Any], journal: list[dict[str, Any]], elicit_id: str, raw: Any
    ) -> str | None:
        """None if ``raw`` is the answer on record for ``elicit_id``; else why not, in words."""
        try:
            wanted = ElicitId.parse(elicit_id)
        except ValueError:
            return "This requestState names no question of this call."
        elicits = [e for e in journal if e.get("kind") == "elicit"]
        if wanted.seq > len(elicits) or elicits[wanted.seq - 1].get("key") != wanted.key:
            return "This requestState names a question this call has not asked."
        recorded = elicits[wanted.seq - 1]["result"]
        refused = (
            f"The question {wanted.key!r} of this call was already answered and its answer "
            "acted on; a different answer cannot be accepted. Send the same answer again to get "
            "the same outcome, or call the tool again without requestState."
        )
        if raw is None:
            return refused
        try:
            models: dict[str, type[BaseModel]] = {APPROVAL_KEY: Approval, **tool.elicits}
            given = validate_result(_answer(raw), models[wanted.key], elicit_id)
        except (ElicitValidationError, KeyError, ValueError):
            return refused
        return None if result_to_dict(given) == recorded else refused

    async def _advance(self, session: PluginSession, caller: str, channel: Channel) -> Outcome:
        """Run the session on to its next question (``input_required``) or its end."""
        channel.progressed = self._progressed.get(session.id, channel.progressed)
        while True:
            event = await session.next_event()
            if event.type in ("log", "progress"):
                await channel.forward(event)
                self._progressed[session.id] = channel.progressed
            elif event.type == "elicit":
                self._arm(session)
                return self._input_required(event.request, caller, "")
            else:
                self._progressed.pop(session.id, None)
                result = _terminal_result(session, event)
                self._ended[session.id] = _Ended(session.journal, result, self._clock() + self.ttl)
                return result

    def _input_required(
        self, request: ElicitRequest, caller: str, note: str
    ) -> types.InputRequiredResult:
        state = RoundState(request.call_id, str(request.id), caller)
        flat = self.flat[request.tool_name][request.key]
        return types.InputRequiredResult(
            input_requests={
                str(request.id): types.ElicitRequest(
                    params=wire_request(request, flat, note, context_in_message=True)
                )
            },
            request_state=state.dump(),
        )

    @contextlib.asynccontextmanager
    async def _round(self, call_id: str) -> AsyncIterator[None]:
        """One round trip of a call at a time; its expiry is off meanwhile and armed again
        after it, even if the request is cancelled: a call nobody continues must end."""
        async with self._lock(call_id):
            self._disarm(call_id)
            try:
                yield
            finally:
                session = self.manager.get(call_id)
                if session is not None and not session.finished:
                    self._arm(session)

    def _lock(self, call_id: str) -> asyncio.Lock:
        lock = self._locks.get(call_id)
        if lock is None:
            lock = self._locks[call_id] = asyncio.Lock()
        return lock

    def _arm(self, session: PluginSession) -> None:
        """Abort the session when its state expires without a retry."""
        self._disarm(session.id)
        loop = asyncio.get_running_loop()
        self._timers[session.id] = loop.call_later(self.ttl, self._expire, session)

    def _disarm(self, call_id: str) -> None:
        timer = self._timers.pop(call_id, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, session: PluginSession) -> None:
        self._timers.pop(session.id, None)
        self._progressed.pop(session.id, None)
        lock = self._locks.get(session.id)
        if lock is not None and not lock.locked():
            del self._locks[session.id]
        reason = "the MCP client did not continue the call before its requestState expired"
        task = asyncio.get_running_loop().create_task(session.abort(reason))
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    def _prune(self) -> None:
        now = self._clock()
        for call_id in [c for c, e in self._ended.items() if e.expires <= now]:
            del self._ended[call_id]
            if not self._lock(call_id).locked():
                self._locks.pop(call_id, None)


def _answer(raw: Any) -> Any:
    answer = types.ElicitResult.model_validate(raw) if isinstance(raw, dict) else raw
    return from_wire(answer.action, answer.content)
