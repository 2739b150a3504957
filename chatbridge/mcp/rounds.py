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
from typing import Any

import mcp_types as types
from pydantic import BaseModel

from chatbridge.core.approval import APPROVAL_KEY, Approval
from chatbridge.core.commitment import abort_requested
from chatbridge.core.elicit import ElicitId, ElicitRequest, result_to_dict, validate_result
from chatbridge.core.exceptions import ElicitValidationError
from chatbridge.core.manager import SessionManager
from chatbridge.core.sessions import PluginSession
from chatbridge.core.tools import McpTool
from chatbridge.mcp.expiry import Expiries
from chatbridge.mcp.hosts import Channel, deliver, errors_text, from_wire, wire_request
from chatbridge.mcp.modes import REFUSED_BY, ModeNotDeclared, modes_of
from chatbridge.mcp.results import CallStore, error_of, final_result, terminal_result
from chatbridge.mcp.urls import url_params

__all__ = ["RoundState", "Rounds"]

logger = logging.getLogger("chatbridge.mcp")

Outcome = types.CallToolResult | types.InputRequiredResult


@dataclass(frozen=True)
class RoundState:
    """What ``requestState`` holds: which call, which question, whose; ``url`` for a URL
    question (its answer comes from its page: the client's is consent only)."""

    call_id: str
    elicit_id: str
    caller: str
    url: bool = False

    def dump(self) -> str:
        data: dict[str, Any] = {
            "call": self.call_id,
            "elicit": self.elicit_id,
            "caller": self.caller,
        }
        if self.url:
            data["url"] = True
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
        return cls(call, elicit, caller, data.get("url") is True)


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
        url_wait: float = 20.0,
    ) -> None:
        """``url_wait``: how long a retry waits for a URL question's page before it answers
        with a ``requestState``-only ``input_required``."""
        self.manager, self.flat, self.ttl, self.store = manager, flat, ttl, store
        self.url_wait = url_wait
        self._clock = clock
        self._locks: dict[str, asyncio.Lock] = {}
        self._ended: dict[str, _Ended] = {}
        self._expiries = Expiries(ttl, self._expire)
        self._progressed: dict[str, float] = {}  # the last progress sent, by live call
        self._asked: dict[str, str] = {}  # the question last returned, by live call
        # Calls between rounds: a URL question's page lets one run on, and end, before the
        # next retry, after which the manager no longer lists it; its events wait here.
        self._live: dict[str, PluginSession] = {}

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
        session = self.manager.get(call_id) or self._live.get(call_id)
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
                    tool,
                    stored.arguments,
                    call_id=call_id,
                    journal=stored.journal,
                    meta=meta,
                    abort_requested=abort_requested(stored.commitment),
                )
            else:
                result = final_result(
                    stored.status, stored.result, stored.error, stored.aborted_by, stored.commitment
                )
                ended = _Ended(stored.journal, result, self._clock() + self.ttl)
        if session is not None and session.pending is None and not session.finished:
            outcome = await self._advance(session, caller, channel)  # resumed: to its question
            if isinstance(outcome, types.CallToolResult):
                session, ended = None, self._ended.get(call_id)
        raw = responses.get(state.elicit_id)  # other keys are not ours to read: ignored
        pending = session.pending if session is not None else None
        if state.url:
            return await self._url_retry(session, ended, state, raw, channel)
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

    async def _url_retry(
        self,
        session: PluginSession | None,
        ended: _Ended | None,
        state: RoundState,
        raw: Any,
        channel: Channel,
    ) -> Outcome:
        """A retry naming a URL question: consent (or nothing) waits for the page a while;
        decline and cancel end the question; once the page answered, the call goes on."""
        caller = state.caller
        pending = session.pending if session is not None else None
        if session is not None and pending is not None and str(pending.id) == state.elicit_id:
            answer = _answer(raw) if raw is not None else None
            if answer is not None and not answer.accepted:
                await deliver(session, pending, answer)
                return await self._advance(session, caller, channel)
            closed = asyncio.ensure_future(session.question_closed(pending.id))
            try:
                await asyncio.wait_for(asyncio.shield(closed), self.url_wait)
            except TimeoutError:
                return types.InputRequiredResult(request_state=state.dump())
            finally:
                closed.cancel()
            return await self._advance(session, caller, channel)
        if ended is None:
            ended = self._ended.get(state.call_id)
        if session is not None and (ended is None or not session.finished):
            pending = session.pending
            if pending is not None and self._asked.get(session.id) == str(pending.id):
                return self._input_required(pending, caller, "")  # already handed out
            return await self._advance(session, caller, channel)  # on, or to its queued end
        if ended is None:
            return error_of("This tool call is no longer known to the server (it expired).")
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
                modes = modes_of(channel.ctx)
                if event.request.mode not in modes:
                    refusal = ModeNotDeclared(event.request.tool_name, event.request.mode, modes)
                    return await self._stop(session, str(refusal))
                self._arm(session)
                self._asked[session.id] = str(event.request.id)
                self._live[session.id] = session
                return self._input_required(event.request, caller, "")
            else:
                self._forget(session.id)
                result = terminal_result(session, event)
                self._ended[session.id] = _Ended(session.journal, result, self._clock() + self.ttl)
                return result

    def _input_required(
        self, request: ElicitRequest, caller: str, note: str
    ) -> types.InputRequiredResult:
        url = request.mode == "url"
        state = RoundState(request.call_id, str(request.id), caller, url)
        flat = self.flat[request.tool_name][request.key]
        params: types.ElicitRequestFormParams | types.ElicitRequestURLParams = (
            url_params(request, with_id=False)
            if url
            else wire_request(request, flat, note, context_in_message=True)
        )
        return types.InputRequiredResult(
            input_requests={str(request.id): types.ElicitRequest(params=params)},
            request_state=state.dump(),
        )

    async def _stop(self, session: PluginSession, reason: str) -> types.CallToolResult:
        """End a call whose question this client cannot take; ``reason`` is its result."""
        await session.abort(reason, by=REFUSED_BY)
        await session.wait_finished()
        self._forget(session.id)
        result = error_of(reason)
        self._ended[session.id] = _Ended(session.journal, result, self._clock() + self.ttl)
        return result

    def _forget(self, call_id: str) -> None:
        self._live.pop(call_id, None)
        self._progressed.pop(call_id, None)
        self._asked.pop(call_id, None)

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
        self._expiries.arm(session)

    def _disarm(self, call_id: str) -> None:
        self._expiries.disarm(call_id)

    async def _expire(self, session: PluginSession) -> None:
        self._forget(session.id)
        lock = self._locks.get(session.id)
        if lock is not None and not lock.locked():
            del self._locks[session.id]
        await session.abort(
            "the MCP client did not continue the call before its requestState expired"
        )

    def _prune(self) -> None:
        now = self._clock()
        for call_id in [c for c, e in self._ended.items() if e.expires <= now]:
            del self._ended[call_id]
            if not self._lock(call_id).locked():
                self._locks.pop(call_id, None)


def _answer(raw: Any) -> Any:
    answer = types.ElicitResult.model_validate(raw) if isinstance(raw, dict) else raw
    return from_wire(answer.action, answer.content)
