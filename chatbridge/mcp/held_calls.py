"""Calls held open for their whole run (protocols up to 2025-11-25): their questions pushed as
elicitation requests, or sent as request notifications that the ``_respond`` tool answers."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from chatbridge.author.tools import McpTool
from chatbridge.calls.drive import drive
from chatbridge.calls.events import SessionEvent
from chatbridge.calls.manager import SessionManager
from chatbridge.mcp.callers import call_meta, identity_of
from chatbridge.mcp.cancellation import CLIENT_GONE, Cancellations
from chatbridge.mcp.hosts import Ask, CarrierHost, Channel, ClientGone, PushCarrier
from chatbridge.mcp.levels import hears
from chatbridge.mcp.modes import REFUSED_BY, ModeNotDeclared
from chatbridge.mcp.respond import RESPOND_TOOL, NotifyCarrier, PendingRequests
from chatbridge.mcp.results import error_of, result_of, terminal_result
from chatbridge.mcp.urls import request_origin

__all__ = ["NO_WAY_TO_ASK", "HeldCalls", "mcp_session_of"]

logger = logging.getLogger("chatbridge.mcp")

NO_WAY_TO_ASK = (
    "Tool {tool!r} asks the user questions, and this client can receive none: it declared no "
    "elicitation capability and its logging level hides the notices questions travel as. "
    "Either declare the elicitation capability, or receive log notifications at level "
    "'notice' (logging/setLevel on protocols up to 2025-11-25; on 2026-07-28 call again with "
    '_meta {{"io.modelcontextprotocol/logLevel": "notice"}}): each question then arrives as a '
    "notifications/message of type 'request', answered by calling the {respond!r} tool with "
    "its request_id and payload."
)


def mcp_session_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """The MCP session (``Mcp-Session-Id``) the request belongs to; empty when stateless."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    return str(headers.get("mcp-session-id", "")) if headers is not None else ""


class HeldCalls:
    """The held-open calls of one MCP server, and the ``_respond`` requests they wait on."""

    def __init__(
        self,
        manager: SessionManager,
        flat: Mapping[str, dict[str, dict[str, Any]]],
        pending: PendingRequests,
        request_timeout: float,
        heartbeat: float,
    ) -> None:
        """``flat``: the form schema of each tool's keys; ``heartbeat``: seconds between pings
        of a client that is being asked."""
        self.manager, self.flat, self.pending = manager, flat, pending
        self.request_timeout, self.heartbeat = request_timeout, heartbeat
        self._cancelled = Cancellations()  # calls whose request ended: aborted, or told

    async def run(
        self,
        ctx: ServerRequestContext[Any, Any],
        tool: McpTool[Any, Any],
        arguments: dict[str, Any],
        call_id: str,
        *,
        push: bool,
        client: str,
    ) -> types.CallToolResult:
        """A call held open for its whole run: pushed questions, or ``_respond`` requests."""
        asks = bool(tool.elicits) or tool.needs_approval
        if not push and asks and not hears(ctx, "notice"):
            return error_of(NO_WAY_TO_ASK.format(tool=tool.name, respond=RESPOND_TOOL))
        meta = {
            **call_meta(ctx),
            "transport": "mcp-push" if push else "mcp-respond",
            "client": client,
            "origin": request_origin(ctx),
            "caller": identity_of(ctx),
            "rpc_id": str(ctx.request_id),  # hostContext.toolInfo.id of an app showing the call
        }
        session = await self.manager.create(tool, arguments, call_id=call_id, meta=meta)
        channel = Channel(ctx)
        ask: Ask
        if push:
            ask = PushCarrier(
                ctx, self.flat[tool.name], self.request_timeout, session, self.heartbeat
            )
        else:
            ask = NotifyCarrier(
                channel,
                self.flat[tool.name],
                self.pending,
                self.request_timeout,
                session,
                mcp_session_of(ctx),
                identity_of(ctx),
                self.heartbeat,
            )
        completed = ask.completed if isinstance(ask, PushCarrier) else None
        try:
            event: SessionEvent = await drive(
                session, CarrierHost(session, channel, ask, completed)
            )
        except ModeNotDeclared as exc:
            await session.abort(str(exc), by=REFUSED_BY)
            await session.wait_finished()
            return error_of(str(exc))
        except ClientGone as exc:
            logger.info("MCP call %s: the client went away (%s)", session.id, exc)
            await session.abort(CLIENT_GONE)
            event = await session.wait_finished()
        except BaseException:  # the request was cancelled, or its session ended
            self._cancelled.abort_later(session, ctx)
            raise
        return terminal_result(session, event)

    async def respond(
        self, ctx: ServerRequestContext[Any, Any], arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """A call of the ``_respond`` tool: the answer to one of the open requests."""
        request_id = arguments.get("request_id")
        if not isinstance(request_id, str):
            raise MCPError(types.INVALID_PARAMS, "_respond needs a string request_id.")
        try:
            note = await self.pending.respond(
                request_id, arguments.get("payload"), mcp_session_of(ctx), identity_of(ctx)
            )
        except KeyError:
            raise MCPError(
                types.INVALID_PARAMS,
                f"No open request {request_id!r}: unknown, answered or timed out.",
            ) from None
        if note:
            return error_of(note)
        return result_of({"ok": True, "request_id": request_id})
