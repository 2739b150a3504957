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
  spec) with the errors in its message. Keys that are not open are ignored (spec: SHOULD),
  except that of a question left when an earlier answer was changed: that update is refused,
  saying what the task waits for now (``task_views.refuse_abandoned``).
- ``tasks/cancel``: aborts the session.

Where a task lives, how it is resumed and when it expires: ``chatbridge.mcp.task_serving``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import decode_header_value
from mcp_types.jsonrpc import HEADER_MISMATCH
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from chatbridge.author.exceptions import ChatBridgeError
from chatbridge.author.tools import McpTool
from chatbridge.calls.manager import SessionManager
from chatbridge.mcp.callers import call_meta
from chatbridge.mcp.caps import Ticket
from chatbridge.mcp.errors import public_error
from chatbridge.mcp.modes import MODES_META, modes_of
from chatbridge.mcp.results import error_of
from chatbridge.mcp.rounds import Rounds
from chatbridge.mcp.task_cluster import TaskCluster
from chatbridge.mcp.task_ids import TaskIds
from chatbridge.mcp.task_serving import TRANSPORT, TaskServing, not_found
from chatbridge.mcp.task_wire import TaskParams, UpdateTaskParams
from chatbridge.mcp.urls import request_origin

__all__ = [
    "TASKS_EXTENSION",
    "TRANSPORT",
    "Tasks",
]

logger = logging.getLogger("chatbridge.mcp")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


def _asks(tool: McpTool[Any, Any]) -> bool:
    return bool(tool.elicits) or tool.needs_approval


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
        self.ids = TaskIds(keys)
        self._caller, self._client = caller, client
        self.serving = TaskServing(
            manager,
            tools,
            rounds._input_required,  # the elicitation an MRTR round would carry
            ttl,
            cluster=cluster,
            settle=settle,
            poll_interval=poll_interval,
        )

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
        task = await self.serving.started(session)
        # The row was written before the session started: tasks/get resolves anywhere now.
        return {"resultType": "task", **task}

    # -- tasks/get, tasks/update, tasks/cancel ----------------------------------------------

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        self._check(ctx, params.task_id)
        task = await self.serving.serve("get", params.task_id, {}, origin=request_origin(ctx))
        return {"resultType": "complete", **task}

    async def _update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> HandlerResult:
        self._check(ctx, params.task_id)
        await self.serving.serve(
            "update", params.task_id, params.input_responses, origin=request_origin(ctx)
        )
        return {"resultType": "complete"}

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> HandlerResult:
        self._check(ctx, params.task_id)
        await self.serving.serve("cancel", params.task_id, {}, origin=request_origin(ctx))
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
            raise not_found()

    async def serve_routed(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """A request another worker routed here (its caller already checked there)."""
        return await self.serving.serve_routed(message)
