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
resumed from its persisted journal by replay, by the worker that claims its lease: a retry
that reaches another worker while the holder lives is refused (the client sends it again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR

from chatbridge.author.elicit import ElicitRequest
from chatbridge.author.tools import McpTool
from chatbridge.calls.commitment import abort_requested
from chatbridge.calls.drive import EndEvent, Pause, drive
from chatbridge.calls.events import LogEvent, ProgressEvent
from chatbridge.calls.manager import SessionManager
from chatbridge.calls.sessions import PluginSession
from chatbridge.mcp.callers import call_meta, identity_of
from chatbridge.mcp.expiry import Expiries
from chatbridge.mcp.hosts import Channel, deliver, errors_text
from chatbridge.mcp.modes import REFUSED_BY, ModeNotDeclared
from chatbridge.mcp.results import CallStore, error_of, recorded_result, terminal_result
from chatbridge.mcp.round_routing import outcome_from, request_of
from chatbridge.mcp.round_state import (
    RoundState,
    answer_of,
    input_required,
    open_at_end,
    same_answer,
)
from chatbridge.mcp.urls import request_origin

__all__ = ["EXPIRED", "HELD_ELSEWHERE", "TRANSPORT", "RoundState", "Rounds"]

logger = logging.getLogger("chatbridge.mcp")

TRANSPORT = "mcp-mrtr"  # the record's name for calls of this era
EXPIRED = "the MCP client did not continue the call before its requestState expired"

Outcome = types.CallToolResult | types.InputRequiredResult

HELD_ELSEWHERE = (
    "This tool call is running on another server right now; send this request again "
    "(with the same requestState) in a moment."
)


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
        # Calls between rounds: a URL question's page lets one run on, and end, before the
        # next retry, after which the manager no longer lists it; its events wait here.
        self._live: dict[str, PluginSession] = {}

    async def call(
        self,
        ctx: ServerRequestContext[Any, Any],
        tool: McpTool[Any, Any],
        arguments: dict[str, Any],
        params: types.CallToolRequestParams,
        call_id: str,
        client: str,
    ) -> Outcome:
        """A ``tools/call`` of a client that takes ``input_required``: the first round, or a
        retry whose ``requestState`` names this caller's call of ``tool``."""
        caller = identity_of(ctx)
        meta = {
            **call_meta(ctx),
            "transport": TRANSPORT,
            "client": client,
            "origin": request_origin(ctx),
        }
        channel = Channel(ctx)
        if params.request_state is None:
            return await self.start(tool, arguments, call_id, caller, channel, meta)
        try:
            state = RoundState.parse(params.request_state)
        except ValueError:
            raise MCPError(types.INVALID_PARAMS, "Invalid requestState.") from None
        if state.caller != caller:
            raise MCPError(types.INVALID_PARAMS, "This requestState belongs to another caller.")
        if not state.call_id.startswith("mcp_") or not state.elicit_id.startswith(f"{tool.name}:"):
            raise MCPError(types.INVALID_PARAMS, "This requestState belongs to another tool.")
        responses = dict(params.input_responses or {})
        return await self.retry(tool, arguments, state, responses, channel, meta)

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
        *,
        routed: bool = False,
    ) -> Outcome:
        """A retry naming ``state``'s question, with the client's ``inputResponses``; sent
        on to the worker holding the call if that is another (unless it was ``routed`` here:
        ``mcp/round_routing.py``)."""
        async with self._round(state.call_id):
            return await self._retry(tool, arguments, state, responses, channel, meta, routed)

    async def _retry(
        self,
        tool: McpTool[Any, Any],
        arguments: dict[str, Any],
        state: RoundState,
        responses: Mapping[str, Any],
        channel: Channel,
        meta: Mapping[str, str],
        routed: bool,
    ) -> Outcome:
        self._prune()
        call_id, caller = state.call_id, state.caller
        session = self.manager.get(call_id) or self._live.get(call_id)
        ended = self._ended.get(call_id)
        if session is None and ended is None:
            # Held by another live worker (one read): that one serves it.
            holder = None
            if self.store is not None and not routed:
                holder = await self.store.holder_elsewhere(call_id)
            if holder is not None:
                message = request_of(tool.name, arguments, state, responses, channel.modes, meta)
                served = await self._route(holder, message)
                if served is not None:
                    return served
                # Its holder died before it answered: the call is taken over here.
            stored = await self.store.load(call_id) if self.store is not None else None
            if stored is None:
                return error_of(
                    "This tool call is no longer known to the server (it expired); call the "
                    "tool again without requestState."
                )
            if stored.status in ("running", "awaiting_elicit", "awaiting_sample"):
                await self._claim(call_id, stored.worker)  # refused if its holder lives
                session = self.manager.get(call_id)  # resumed meanwhile (a takeover's sweep)
                if session is None:
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
                result = recorded_result(stored)
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
                question = session.question
                errors = question.error if question is not None else None
                return self._input_required(pending, caller, errors_text(errors) if errors else "")
            note = await deliver(session, pending, answer_of(raw))
            if note:
                return self._input_required(pending, caller, note)
            return await self._advance(session, caller, channel)
        if session is None and ended is not None and open_at_end(ended.journal, state.elicit_id):
            return ended.result  # it ended while this question was open: that end again
        journal = session.journal if session is not None else ended.journal if ended else []
        same = same_answer(tool, journal, state.elicit_id, raw)
        if same is not None:
            return error_of(same)
        if session is not None and pending is not None:
            return self._input_required(pending, caller, "")
        if session is not None:  # between questions: drive on to the next one
            return await self._advance(session, caller, channel)
        assert ended is not None
        return ended.result

    async def _elsewhere(self, holder: str) -> bool:
        """Is the call held by another worker that is alive?"""
        store = self.store
        assert store is not None
        return holder != store.worker and await store.alive(holder)

    async def _route(self, holder: str, message: dict[str, Any]) -> Outcome | None:
        """``holder`` serves the retry; None if it died before it answered (the call is
        taken over by whoever asked); alive but unreachable, the retry is refused (the client
        sends it again)."""
        assert self.store is not None
        reply = await self.store.route(holder, message)
        if reply is None:
            if not await self._elsewhere(holder):
                return None
            raise MCPError(INTERNAL_ERROR, HELD_ELSEWHERE)
        logger.info("MCP call %s: retry served by its holder %s", message["call_id"], holder)
        return outcome_from(reply)

    async def _claim(self, call_id: str, holder: str) -> None:
        """Take the stored call's lease from ``holder`` (gone) before resuming it; a live
        holder keeps it, and this retry is refused (``MCPError``) for the client to send
        again."""
        store = self.store
        assert store is not None
        if await self._elsewhere(holder):
            logger.info("MCP call %s is held by live worker %s: not resumed here", call_id, holder)
            raise MCPError(INTERNAL_ERROR, HELD_ELSEWHERE)
        if not await store.claim(call_id, holder):
            raise MCPError(INTERNAL_ERROR, HELD_ELSEWHERE)  # another worker took it just now

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
            answer = answer_of(raw) if raw is not None else None
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
            question = session.question
            if question is not None and question.shown is not None:
                return self._input_required(question.request, caller, "")  # already handed out
            return await self._advance(session, caller, channel)  # on, or to its queued end
        if ended is None:
            return error_of("This tool call is no longer known to the server (it expired).")
        return ended.result

    async def _advance(self, session: PluginSession, caller: str, channel: Channel) -> Outcome:
        """Run the session on to its next question (``input_required``) or its end."""
        channel.progressed = self._progressed.get(session.id, channel.progressed)
        return await drive(session, RoundHost(self, session, caller, channel))

    def _handed_out(self, session: PluginSession, request: ElicitRequest, caller: str) -> Outcome:
        """The round ends at ``request``: its ``input_required``, kept on the question."""
        self._arm(session)
        self._live[session.id] = session
        shown = self._input_required(request, caller, "")
        question = session.question
        if question is not None and question.id == str(request.id):
            question.shown = shown  # handed out: a retry gets it again
        return shown

    def _ended_here(self, session: PluginSession, event: EndEvent) -> Outcome:
        self._forget(session.id)
        result = terminal_result(session, event)
        self._ended[session.id] = _Ended(session.journal, result, self._clock() + self.ttl)
        return result

    def _progressed_to(self, session: PluginSession, channel: Channel) -> None:
        self._progressed[session.id] = channel.progressed

    def _input_required(
        self, request: ElicitRequest, caller: str, note: str
    ) -> types.InputRequiredResult:
        return input_required(self.flat, request, caller, note)

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
        await session.abort(EXPIRED)

    def _prune(self) -> None:
        now = self._clock()
        for call_id in [c for c, e in self._ended.items() if e.expires <= now]:
            del self._ended[call_id]
            if not self._lock(call_id).locked():
                self._locks.pop(call_id, None)


class RoundHost:
    """A 2026-07-28 round as a ``Host`` (``chatbridge.calls.drive``): logs and progress are
    notifications of the round's request; the round pauses at the next question, which it
    returns as ``input_required`` (or ends the call, if the client cannot take its mode), or
    returns the call's result."""

    def __init__(self, rounds: Rounds, session: PluginSession, caller: str, channel: Channel):
        self.rounds, self.session, self.caller, self.channel = rounds, session, caller, channel

    async def question(self, request: ElicitRequest) -> Pause[Outcome]:
        modes = self.channel.modes
        if request.mode not in modes:
            refusal = ModeNotDeclared(request.tool_name, request.mode, modes)
            return Pause(await self.rounds._stop(self.session, str(refusal)))
        return Pause(self.rounds._handed_out(self.session, request, self.caller))

    async def log(self, event: LogEvent) -> None:
        await self.channel.forward(event)

    async def progress(self, event: ProgressEvent) -> None:
        await self.channel.forward(event)
        self.rounds._progressed_to(self.session, self.channel)

    async def ended(self, event: EndEvent) -> Outcome:
        return self.rounds._ended_here(self.session, event)
