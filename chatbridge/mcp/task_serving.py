"""Serving MCP Tasks wherever they live (DESIGN §9); ``chatbridge.mcp.tasks`` is the extension
that creates them and answers ``tasks/*``.

Where the session lives: this worker serves it; a task held by another live worker is routed
there (``TaskCluster.route``); a task whose worker is gone (killed, restarted) is claimed — its
lease, a compare-and-set on the holder seen, so one worker wins — and resumed by replaying its
journal: recorded steps are not run again, and the old worker, if it was only slow, can no
longer write the journal (its writes are fenced by the lease).

What a resumed task keeps: the session meta it was started with is on record (``ToolSession.meta``):
its questions are shown only in the elicitation modes the creating request declared (a question
in another mode is never shown; the task ends as a tool error with the text every MCP path gives,
``ModeNotDeclared``); its URL links point at the server the client reaches now (else the one it
was created on; ``CHATBRIDGE_PUBLIC_URL`` wins); its open question keeps its count of refused
answers, so it comes back under the key it had, never one already answered.

Every task expires ``ttl`` seconds after it was last touched (the session is aborted, on record,
with ``EXPIRED``); a task found suspended past its ttl whose worker is gone is ended on record
the same way when asked for, not resumed. An ended task's result stays readable for ``ttl``
after its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS

from chatbridge.author.tools import McpTool
from chatbridge.calls.commitment import abort_requested
from chatbridge.calls.drive import drive
from chatbridge.calls.manager import SessionManager
from chatbridge.calls.outcome import BY_CLIENT, BY_SERVER
from chatbridge.calls.sessions import PluginSession
from chatbridge.calls.transports import TASK
from chatbridge.mcp.expiry import Expiries
from chatbridge.mcp.hosts import deliver, from_wire
from chatbridge.mcp.task_cluster import TaskCluster, TaskRecord
from chatbridge.mcp.task_views import (
    Shape,
    TaskHost,
    answer_key,
    live_task,
    recorded_task,
    refuse_abandoned,
)

__all__ = ["EXPIRED", "TRANSPORT", "TaskServing", "not_found"]

logger = logging.getLogger("chatbridge.mcp")

TRANSPORT = TASK
CANCELLED_BY = BY_CLIENT  # aborted_by of a task ended by tasks/cancel
EXPIRED = "the task expired: the client did not continue it in time"
EXPIRED_BY = BY_SERVER
_ACTIVE = ("running", "awaiting_elicit", "awaiting_sample")

NOT_FOUND = "Failed to retrieve task: Task not found"
GONE = "Failed to retrieve task: Task has expired"
UNREACHABLE = "The server running this task cannot be reached right now; try again shortly."


def not_found(message: str = NOT_FOUND) -> MCPError:
    """The error of a task this caller cannot see (unknown, another's, or gone)."""
    return MCPError(INVALID_PARAMS, message)


@dataclass
class _Ended:
    task: dict[str, Any]  # the task as tasks/get shows it, without resultType
    until: datetime


class TaskServing:
    """The tasks of one MCP server: those live here, followed to their end, and those held
    elsewhere, routed to their holder or resumed here (see the module docstring)."""

    def __init__(
        self,
        manager: SessionManager,
        tools: Mapping[str, McpTool[Any, Any]],
        shape: Shape,
        ttl: float,
        *,
        cluster: TaskCluster | None,
        settle: float,
        poll_interval: float,
    ) -> None:
        """``shape``: the elicitation an MRTR round would carry (``Rounds._input_required``);
        ``settle``: how long a call or an update waits for the next question or the end."""
        self.manager, self.served, self.shape = manager, tools, shape
        self.ttl, self.cluster = ttl, cluster
        self.settle, self.poll_ms = settle, int(poll_interval * 1000)
        self._created: dict[str, datetime] = {}
        self._drivers: dict[str, asyncio.Task[None]] = {}
        self._expiries = Expiries(ttl, self._expire)
        self._locks: dict[str, asyncio.Lock] = {}
        self._ended: dict[str, _Ended] = {}
        self._changed: dict[str, asyncio.Event] = {}  # set at each of the session's events

    async def started(self, session: PluginSession) -> dict[str, Any]:
        """Follow a task just created here; the task as its ``CreateTaskResult`` shows it, once
        it has asked its first question or ended (or ``settle`` has passed)."""
        self._created[session.id] = session.created_at
        self._follow(session)
        await self._settled(session)
        return await self._task(session, details=False)

    # -- serving, wherever the task lives ---------------------------------------------------

    async def serve_routed(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """A request another worker routed here (its caller already checked there)."""
        try:
            task = await self.serve(
                str(message["op"]),
                str(message["task_id"]),
                dict(message.get("responses") or {}),
                routed=True,
                origin=str(message.get("origin") or ""),
            )
        except MCPError as exc:
            return {"error": {"code": exc.error.code, "message": exc.error.message}}
        return {"task": task}

    async def serve(
        self,
        op: str,
        task_id: str,
        responses: Mapping[str, Any],
        *,
        routed: bool = False,
        origin: str = "",
    ) -> dict[str, Any]:
        """The task as tasks/get shows it, after ``op`` (get, update or cancel); ``origin``:
        the requester's, for the links of a task resumed here."""
        self._prune()
        session = self._live(task_id)
        driver = self._drivers.get(task_id)
        if session is None and driver is not None:
            # Its session has just ended here and its driver is recording how: wait for that
            # (a moment) rather than look for the task on record while its end is being written.
            await asyncio.wait({driver})
        if session is None and task_id not in self._ended:
            async with self._lock(task_id):  # one takeover at a time in this process
                session = self._live(task_id)
                if session is None and task_id not in self._ended:
                    found = await self._elsewhere(op, task_id, responses, routed, origin)
                    if isinstance(found, dict):
                        return found
                    session = found
        if session is None:
            return self._ended[task_id].task
        if op == "update":
            await self._answer(session, responses)
        elif op == "cancel":
            await session.abort("cancelled by the MCP client", by=CANCELLED_BY)
        return await self._task(session)

    async def take_over(self, task_id: str) -> bool:
        """Resume a task that no live worker holds (``chatbridge.cluster.takeover``) as its
        client's next request would; True if it runs here now."""
        try:
            await self.serve("get", task_id, {})
        except MCPError as exc:  # taken by another worker, or unreachable: tried again later
            logger.info("MCP task %s not taken over here: %s", task_id, exc.error.message)
            return False
        return self._live(task_id) is not None

    def _live(self, task_id: str) -> PluginSession | None:
        session = self.manager.get(task_id)
        if session is None or session.meta.get("transport") != TRANSPORT:
            return None
        return session

    async def _elsewhere(
        self, op: str, task_id: str, responses: Mapping[str, Any], routed: bool, origin: str
    ) -> PluginSession | dict[str, Any]:
        """A task not live here: its worker's answer, its record, or the session resumed."""
        cluster = self.cluster
        if cluster is None:
            raise not_found()
        # Held by another live worker (one read): that one serves it.
        holder = await cluster.holder_elsewhere(task_id)
        if holder is not None:
            if routed:  # the holder sent it here: it does not hold it any more; ask again
                raise MCPError(INTERNAL_ERROR, UNREACHABLE)
            message = {"op": op, "task_id": task_id, "responses": dict(responses), "origin": origin}
            reply = await cluster.route(holder, message)
            if reply is None and await cluster.alive(holder):
                raise MCPError(INTERNAL_ERROR, UNREACHABLE)  # alive, but cannot be reached
            if reply is not None:
                if "error" in reply:
                    raise MCPError(int(reply["error"]["code"]), str(reply["error"]["message"]))
                return dict(reply["task"])
            # Its holder died before it answered: the task is taken over here.
        record = await cluster.find(task_id)
        if record is None:
            raise not_found()
        now = datetime.now(UTC)
        if record.call.status not in _ACTIVE:
            if (record.ended_at or record.updated_at) + timedelta(seconds=self.ttl) < now:
                raise not_found(GONE)
            return self._recorded(task_id, record)
        holder = record.worker
        expired = record.updated_at + timedelta(seconds=self.ttl) < now
        alive_elsewhere = holder != cluster.worker and await cluster.alive(holder)
        if expired and not alive_elsewhere and not record.call.committed:
            # Suspended past its ttl, its worker gone: not resumed, ended on record.
            return await self._end_expired(task_id, holder)
        if alive_elsewhere:  # it came to life (or was taken) since its lease was read
            raise MCPError(INTERNAL_ERROR, UNREACHABLE)
        if not await cluster.claim(task_id, holder):
            raise MCPError(INTERNAL_ERROR, UNREACHABLE)  # another worker took it over just now
        return await self._resume(task_id, record, origin)

    async def _end_expired(self, task_id: str, holder: str) -> dict[str, Any]:
        """End a suspended task past its ttl on record; the task as it then shows."""
        cluster = self.cluster
        assert cluster is not None
        if not await cluster.end(task_id, holder, EXPIRED, EXPIRED_BY):
            raise MCPError(INTERNAL_ERROR, UNREACHABLE)  # another worker took it just now
        logger.info("MCP task %s expired while suspended; ended on record", task_id)
        record = await cluster.find(task_id)
        if record is None:
            raise not_found()
        return self._recorded(task_id, record)

    async def _resume(self, task_id: str, record: TaskRecord, origin: str) -> PluginSession:
        tool = self.served.get(record.call.tool_name)
        if tool is None:
            raise not_found()
        logger.info("resuming MCP task %s from its journal", task_id)
        # The meta it was started with; its links point where the client reaches us now.
        meta = {**record.meta, "transport": TRANSPORT}
        meta["origin"] = origin or record.meta.get("origin", "")
        session = await self.manager.create(
            tool,
            record.call.arguments,
            call_id=task_id,
            journal=record.call.journal,
            meta=meta,
            abort_requested=abort_requested(record.call.commitment),
            # Its question comes back under the key it had, not a used one.
            refused_on_record=(record.pending, record.refused) if record.refused else None,
        )
        self._created[task_id] = record.created_at
        self._follow(session)
        await self._settled(session)
        return session

    async def _answer(self, session: PluginSession, responses: Mapping[str, Any]) -> None:
        """Deliver the answer to the open question, if ``responses`` has one under its key."""
        async with self._lock(session.id):
            pending = session.pending
            asking = pending is not None and self._asking(session)
            raw = responses.get(self._key(session)) if asking else None
            if pending is None or raw is None:
                refuse_abandoned(session, responses)  # a question a change left: an error
                return  # other keys that are not open are ignored (spec: SHOULD)
            answer = types.ElicitResult.model_validate(raw) if isinstance(raw, dict) else raw
            if pending.mode == "url" and answer.action == "accept":
                return  # consent only: the question's page answers it (mcp/urls.py)
            await deliver(session, pending, from_wire(answer.action, answer.content, answer.meta))
            self._arm(session)
            await self._settled(session)

    # -- following live sessions ------------------------------------------------------------

    def _follow(self, session: PluginSession) -> None:
        """Drain the session's events (tasks carry no logs or progress), note which question
        it has put on record, and keep its end."""
        self._arm(session)
        self._changed[session.id] = asyncio.Event()
        self._drivers[session.id] = asyncio.get_running_loop().create_task(
            self._drive(session), name=f"chatbridge-task:{session.id}"
        )

    async def _drive(self, session: PluginSession) -> None:
        try:
            await drive(session, TaskHost(session, self._changed_now))
            if not session.parked:  # parked: the process stops; the call stays on record
                task = await self._task(session)
                until = datetime.now(UTC) + timedelta(seconds=self.ttl)
                self._ended[session.id] = _Ended(task, until)
        finally:
            self._drivers.pop(session.id, None)
            self._disarm(session.id)
            self._created.pop(session.id, None)
            self._changed.pop(session.id, asyncio.Event()).set()

    def _changed_now(self, session: PluginSession) -> None:
        """Wake whoever waits for the task to change (``tasks/get`` long polls, updates)."""
        self._changed.pop(session.id, asyncio.Event()).set()
        self._changed[session.id] = asyncio.Event()

    def _asking(self, session: PluginSession) -> bool:
        """Does the session wait for an answer to a question it has put on record?"""
        question = session.question
        return question is not None and question.shown is not None

    async def _settled(self, session: PluginSession) -> None:
        """Wait (a little) for the session to ask its next question or end."""
        deadline = asyncio.get_running_loop().time() + self.settle
        while not (session.finished or self._asking(session)):
            changed = self._changed.get(session.id)
            remaining = deadline - asyncio.get_running_loop().time()
            if changed is None or remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    def _arm(self, session: PluginSession) -> None:
        self._expiries.arm(session)

    def _disarm(self, call_id: str) -> None:
        self._expiries.disarm(call_id)

    @staticmethod
    async def _expire(session: PluginSession) -> None:
        await session.abort(EXPIRED, by=EXPIRED_BY)

    def _lock(self, task_id: str) -> asyncio.Lock:
        lock = self._locks.get(task_id)
        if lock is None:
            lock = self._locks[task_id] = asyncio.Lock()
        return lock

    def _prune(self) -> None:
        now = datetime.now(UTC)
        for task_id in [t for t, e in self._ended.items() if e.until <= now]:
            del self._ended[task_id]
            lock = self._locks.get(task_id)
            if lock is not None and not lock.locked():
                del self._locks[task_id]

    # -- what a task looks like (``chatbridge.mcp.task_views``) ---------------------------

    def _key(self, session: PluginSession) -> str:
        return answer_key(session)

    async def _task(self, session: PluginSession, *, details: bool = True) -> dict[str, Any]:
        if session.stopping:  # its end is decided: shown once reached, not "working" before
            await self._settled(session)
        created = self._created.get(session.id, session.created_at)
        return await live_task(session, created, self.ttl, self.poll_ms, self.shape, details)

    def _recorded(self, task_id: str, record: TaskRecord) -> dict[str, Any]:
        return recorded_task(task_id, record, self.ttl, self.poll_ms)
