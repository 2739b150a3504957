"""The 2026-07-28 Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663) over durable
sessions (DESIGN §9).

A task is a ``PluginSession`` like any MCP call: a ``ToolSession`` row (transport
``mcp-task``) and a persisted journal. Its id is the call id: random, and bound to the caller by
a MAC of the Authorization digest (keyed like ``requestState``), so it is unguessable, useless to
anyone else, and checked by any worker without a lookup.

- ``tools/call`` from a 2026-07-28 client that declares the extension (and elicitation) for a
  tool that asks questions: the session starts and the call returns a ``CreateTaskResult`` at
  once (after a short wait for its first question). Tools that ask nothing answer as before.
- ``tasks/get``: working, input_required with the open question as MRTR ``inputRequests``,
  completed with the ``CallToolResult`` (tool errors are results, ``isError``), or cancelled.
- ``tasks/update``: answers the open question; the session validates it. A refused answer keeps
  the task ``input_required``: the question comes back under a new key (keys are never reused,
  spec) with the errors in its message. Keys that are not open are ignored (spec: SHOULD).
- ``tasks/cancel``: aborts the session.

Where the session lives: this worker serves it; a task held by another live worker is routed
there (``TaskCluster.route``); a task whose worker is gone (killed, restarted) is claimed — an
atomic compare-and-set on the row, so one worker wins — and resumed by replaying its journal:
recorded steps are not run again, and the old worker, if it was only slow, can no longer write
the journal (its writes are fenced on the row's worker).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import decode_header_value
from mcp_types.jsonrpc import HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from chatbridge.core.commitment import abort_decision_text, abort_requested
from chatbridge.core.exceptions import ChatBridgeError
from chatbridge.core.manager import SessionManager
from chatbridge.core.sessions import PluginSession
from chatbridge.core.tools import McpTool
from chatbridge.mcp.callers import call_meta
from chatbridge.mcp.caps import Ticket
from chatbridge.mcp.errors import public_error
from chatbridge.mcp.expiry import Expiries
from chatbridge.mcp.hosts import deliver, errors_text, from_wire
from chatbridge.mcp.modes import MODES_META, REFUSED_BY, ModeNotDeclared, modes_in, modes_of
from chatbridge.mcp.results import error_of, final_result, terminal_result
from chatbridge.mcp.rounds import Rounds
from chatbridge.mcp.task_cluster import TaskCluster, TaskRecord
from chatbridge.mcp.task_ids import TaskIds
from chatbridge.mcp.task_wire import TaskParams, UpdateTaskParams, dump, ended_view, task_times
from chatbridge.mcp.urls import request_origin

__all__ = [
    "TASKS_EXTENSION",
    "TRANSPORT",
    "Tasks",
]

logger = logging.getLogger("chatbridge.mcp")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TRANSPORT = "mcp-task"
CANCELLED_BY = "mcp-client"  # aborted_by of a task ended by tasks/cancel
EXPIRED = "the task expired: the client did not continue it in time"
EXPIRED_BY = "server"
_ACTIVE = ("running", "awaiting_elicit", "awaiting_sample")

NOT_FOUND = "Failed to retrieve task: Task not found"
GONE = "Failed to retrieve task: Task has expired"
UNREACHABLE = "The server running this task cannot be reached right now; try again shortly."


def _asks(tool: McpTool[Any, Any]) -> bool:
    return bool(tool.elicits) or tool.needs_approval


def _not_found(message: str = NOT_FOUND) -> MCPError:
    return MCPError(INVALID_PARAMS, message)


@dataclass
class _Ended:
    task: dict[str, Any]  # the task as tasks/get shows it, without resultType
    until: datetime


class Tasks(Extension):
    """The Tasks extension of one MCP server (see the module docstring)."""

    identifier = TASKS_EXTENSION

    def __init__(
        self,
        manager: SessionManager,
        tools: Mapping[str, McpTool[Any, Any]],
        rounds: Rounds,
        keys: Sequence[bytes],
        ttl: float,
        *,
        caller: Callable[[ServerRequestContext[Any, Any]], str],
        client: Callable[[ServerRequestContext[Any, Any]], str],
        cluster: TaskCluster | None = None,
        settle: float = 3.0,
        poll_interval: float = 1.0,
        admit: Callable[[ServerRequestContext[Any, Any]], Ticket] | None = None,
    ) -> None:
        """``settle``: how long a call or an update waits for the next question or the end
        before answering (the spec allows either; waiting saves the client a poll).
        ``admit``: a new task's place under its caller's cap (``MCPError`` at the cap)."""
        self.manager, self.served, self.rounds = manager, tools, rounds
        self._admit = admit
        self.ids, self.ttl, self.cluster = TaskIds(keys), ttl, cluster
        self._caller, self._client = caller, client
        self.settle, self.poll_ms = settle, int(poll_interval * 1000)
        self._created: dict[str, datetime] = {}
        self._drivers: dict[str, asyncio.Task[None]] = {}
        self._expiries = Expiries(ttl, self._expire)
        self._locks: dict[str, asyncio.Lock] = {}
        self._ended: dict[str, _Ended] = {}
        self._asked: dict[str, str] = {}  # call id → the question it put on record
        self._refused: dict[str, tuple[str, int]] = {}  # resumed: (open question, refusals)
        self._changed: dict[str, asyncio.Event] = {}  # set at each of the session's events

    # -- the extension's contributions ------------------------------------------------------

    def methods(self) -> Sequence[MethodBinding]:
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskParams, self._get, modern),
            MethodBinding("tasks/update", UpdateTaskParams, self._update, modern),
            MethodBinding("tasks/cancel", TaskParams, self._cancel, modern),
        ]

    async def intercept_tool_call(
        self,
        params: types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """A task for a call that asks questions, when this request lets us; else the call as
        it would be without the extension."""
        tool = self.served.get(params.name)
        caps = ctx.session.client_capabilities
        if (
            tool is None
            or not _asks(tool)
            or params.request_state is not None  # an MRTR retry stays one
            or ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
            or caps is None
            or caps.elicitation is None  # its questions could not be shown
            or TASKS_EXTENSION not in (caps.extensions or {})
        ):
            return await call_next(ctx)
        call_id = self.ids.new(self._caller(ctx))
        meta = {
            **call_meta(ctx),
            "transport": TRANSPORT,
            "client": self._client(ctx),
            "origin": request_origin(ctx),  # links of its URL questions are absolute
            # Its questions are shown in these modes only, also when the task is resumed later
            # (the meta is on record) and asked for by a request declaring others.
            MODES_META: ",".join(sorted(modes_of(ctx))),
        }
        ticket = self._admit(ctx) if self._admit is not None else None
        try:
            session = await self.manager.create(
                tool, dict(params.arguments or {}), call_id=call_id, meta=meta
            )
        except Exception as exc:  # the same readable text as a call without the extension
            if not isinstance(exc, ChatBridgeError):
                logger.exception("MCP task of %s could not start", tool.name)
            return error_of(public_error(exc))
        finally:
            if ticket is not None:  # held until the task's call ends
                ticket.follow(self.manager.get(call_id))
        self._created[call_id] = session.created_at
        self._follow(session)
        await self._settled(session)
        # The row was written before the session started: tasks/get resolves anywhere now.
        return {"resultType": "task", **await self._task(session, details=False)}

    # -- tasks/get, tasks/update, tasks/cancel ----------------------------------------------

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        self._check(ctx, params.task_id)
        task = await self._serve("get", params.task_id, {}, origin=request_origin(ctx))
        return {"resultType": "complete", **task}

    async def _update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> HandlerResult:
        self._check(ctx, params.task_id)
        await self._serve(
            "update", params.task_id, params.input_responses, origin=request_origin(ctx)
        )
        return {"resultType": "complete"}

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> HandlerResult:
        self._check(ctx, params.task_id)
        await self._serve("cancel", params.task_id, {}, origin=request_origin(ctx))
        return {"resultType": "complete"}

    def _check(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> None:
        """The spec's gates: the extension declared on this request, ``Mcp-Name`` (when sent)
        naming this task, and the task belonging to this caller."""
        require_client_extension(ctx, TASKS_EXTENSION)
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        named = headers.get("mcp-name") if headers is not None else None
        if named is not None and decode_header_value(named) != task_id:
            raise MCPError(HEADER_MISMATCH, "The Mcp-Name header does not name this task.")
        if not self.ids.owns(self._caller(ctx), task_id):
            raise _not_found()

    # -- serving, wherever the task lives ---------------------------------------------------

    async def serve_routed(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """A request another worker routed here (its caller already checked there)."""
        try:
            task = await self._serve(
                str(message["op"]),
                str(message["task_id"]),
                dict(message.get("responses") or {}),
                routed=True,
                origin=str(message.get("origin") or ""),
            )
        except MCPError as exc:
            return {"error": {"code": exc.error.code, "message": exc.error.message}}
        return {"task": task}

    async def _serve(
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

    def _live(self, task_id: str) -> PluginSession | None:
        session = self.manager.get(task_id)
        if session is None or session.meta.get("transport") != TRANSPORT:
            return None
        return session

    async def _elsewhere(
        self, op: str, task_id: str, responses: Mapping[str, Any], routed: bool, origin: str
    ) -> PluginSession | dict[str, Any]:
        """A task not live here: its record, its worker's answer, or the session resumed."""
        cluster = self.cluster
        record = await cluster.find(task_id) if cluster is not None else None
        if cluster is None or record is None:
            raise _not_found()
        now = datetime.now(UTC)
        if record.call.status not in _ACTIVE:
            if (record.ended_at or record.updated_at) + timedelta(seconds=self.ttl) < now:
                raise _not_found(GONE)
            return self._recorded(task_id, record)
        holder = record.worker
        elsewhere = holder != cluster.worker and await cluster.alive(holder)
        expired = record.updated_at + timedelta(seconds=self.ttl) < now
        if expired and not elsewhere and not record.call.committed:
            # Suspended past its ttl, its worker gone: not resumed, ended on record.
            return await self._end_expired(task_id, holder)
        if elsewhere:
            if routed:  # the holder sent it here: it does not hold it any more; ask again
                raise MCPError(INTERNAL_ERROR, UNREACHABLE)
            message = {"op": op, "task_id": task_id, "responses": dict(responses), "origin": origin}
            reply = await cluster.route(holder, message)
            if reply is None:
                raise MCPError(INTERNAL_ERROR, UNREACHABLE)
            if "error" in reply:
                raise MCPError(int(reply["error"]["code"]), str(reply["error"]["message"]))
            return dict(reply["task"])
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
            raise _not_found()
        return self._recorded(task_id, record)

    async def _resume(self, task_id: str, record: TaskRecord, origin: str) -> PluginSession:
        tool = self.served.get(record.call.tool_name)
        if tool is None:
            raise _not_found()
        logger.info("resuming MCP task %s from its journal", task_id)
        # The meta it was started with; its links point where the client reaches us now.
        meta = {**record.meta, "transport": TRANSPORT}
        meta["origin"] = origin or record.meta.get("origin", "")
        if record.refused:  # its question comes back under the key it had, not a used one
            self._refused[task_id] = (record.pending, record.refused)
        session = await self.manager.create(
            tool,
            record.call.arguments,
            call_id=task_id,
            journal=record.call.journal,
            meta=meta,
            abort_requested=abort_requested(record.call.commitment),
        )
        self._created[task_id] = record.created_at
        self._follow(session)
        await self._settled(session)
        return session

    async def _answer(self, session: PluginSession, responses: Mapping[str, Any]) -> None:
        """Deliver the answer to the open question, if ``responses`` has one under its key."""
        async with self._lock(session.id):
            pending = session.pending
            if pending is None or not self._asking(session):
                return
            raw = responses.get(self._key(session))
            if raw is None:
                return  # keys that are not open are ignored (spec: SHOULD)
            answer = types.ElicitResult.model_validate(raw) if isinstance(raw, dict) else raw
            if pending.mode == "url" and answer.action == "accept":
                return  # consent only: the question's page answers it (mcp/urls.py)
            await deliver(session, pending, from_wire(answer.action, answer.content))
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
            while True:
                event = await session.next_event()
                if event.type == "elicit":  # emitted once the question is on record
                    modes = modes_in(session.meta)
                    request = event.request
                    if request.mode in modes:
                        earlier = self._refused.pop(session.id, None)
                        if earlier is not None and earlier[0] == str(request.id):
                            attempts = max(session.pending_attempts, earlier[1])
                            session.pending_attempts = attempts
                        self._asked[session.id] = str(request.id)
                    else:  # never shown: the task ends with the error other paths give
                        refusal = ModeNotDeclared(request.tool_name, request.mode, modes)
                        await session.abort(str(refusal), by=REFUSED_BY)
                self._changed.pop(session.id, asyncio.Event()).set()
                self._changed[session.id] = asyncio.Event()
                if event.type in ("completed", "failed", "aborted"):
                    break
            if not session.parked:  # parked: the process stops; the call stays on record
                task = await self._task(session)
                until = datetime.now(UTC) + timedelta(seconds=self.ttl)
                self._ended[session.id] = _Ended(task, until)
        finally:
            self._drivers.pop(session.id, None)
            self._disarm(session.id)
            self._created.pop(session.id, None)
            self._asked.pop(session.id, None)
            self._refused.pop(session.id, None)
            self._changed.pop(session.id, asyncio.Event()).set()

    def _asking(self, session: PluginSession) -> bool:
        """Does the session wait for an answer to a question it has put on record?"""
        pending = session.pending
        return pending is not None and self._asked.get(session.id) == str(pending.id)

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

    # -- what a task looks like -------------------------------------------------------------

    def _key(self, session: PluginSession) -> str:
        """The open question's key: its id, and a new key after each refused answer (a key
        is never reused once answered: spec)."""
        pending = session.pending
        assert pending is not None
        attempts = session.pending_attempts
        return f"{pending.id}#{attempts + 1}" if attempts else str(pending.id)

    async def _task(self, session: PluginSession, *, details: bool = True) -> dict[str, Any]:
        created = self._created.get(session.id, session.created_at)
        task = task_times(session.id, created, session.updated_at, self.ttl, self.poll_ms)
        if session.finished:
            event = await session.wait_finished()  # at once: it has ended
            outcome = terminal_result(session, event)
            task.update(ended_view(event.type, session.aborted_by or "", outcome, details))
            return task
        pending = session.pending
        if pending is None or not self._asking(session):
            commitment, requested = session.commitment, session.abort_requested
            if commitment is not None and requested is not None:  # cancelled after it committed
                said = abort_decision_text(session.abort_decision(), commitment.what)
                return {**task, "status": "working", "statusMessage": said}
            return {**task, "status": "working"}
        task["status"] = "input_required"
        task["statusMessage"] = pending.message.splitlines()[0] if pending.message else ""
        if details:
            errors = session.pending_errors
            note = errors_text(errors) if errors else ""
            # The same elicitation an MRTR round would carry (Rounds builds it).
            shaped = self.rounds._input_required(pending, "", note)
            [request] = (shaped.input_requests or {}).values()
            task["inputRequests"] = {self._key(session): dump(request)}
        return task

    def _recorded(self, task_id: str, record: TaskRecord) -> dict[str, Any]:
        call = record.call
        task = task_times(
            task_id, record.created_at, record.ended_at or record.updated_at, self.ttl, self.poll_ms
        )
        outcome = final_result(
            call.status, call.result, call.error, call.aborted_by, call.commitment
        )
        task.update(ended_view(call.status, call.aborted_by, outcome, True))
        return task
