"""Resuming an MCP event stream on a worker that does not hold its session.

A client cut off mid-call reconnects (GET with ``Last-Event-ID``) wherever the balancer sends
it. The worker holding the session replays through the SDK; any other worker replays the
events the holder kept in the shared event log (Redis), then ends the stream, after which the
client reconnects in ``retry_ms``. Live events reach only the holder's streams (issue 27).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import mcp_types as types
from mcp.server.streamable_http import GET_STREAM_KEY, EventMessage
from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.requests import Request

from chatbridge.asgi_types import Receive, Scope, Send
from chatbridge.mcp.events import EventLog, ResumableSessions, SessionEvents

__all__ = ["ElsewhereReplay", "HeldEnd"]

# The result of the call a legacy request (session id, request id) carried, once it has ended
# on record (None while it runs or is being finished).
HeldEnd = Callable[[str, str], Awaitable[types.CallToolResult | None]]


class ElsewhereReplay:
    """Serves a resumed stream of a session another worker holds (see the module docstring)."""

    def __init__(
        self,
        sessions: ResumableSessions,
        events: EventLog,
        security: TransportSecurityMiddleware,
        retry_ms: int,
        *,
        held_ends: HeldEnd | None = None,
    ) -> None:
        self.sessions, self.events, self._security = sessions, events, security
        self.retry_ms, self.held_ends = retry_ms, held_ends

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """A client resuming a stream of a session another worker holds: the events that
        worker kept (when the log is shared), then the end of the stream, after which the
        client reconnects in ``retry_ms``. Live events reach only the holder's streams."""
        headers = dict(scope.get("headers") or [])
        last = headers.get(b"last-event-id", b"").decode("latin-1")
        session = headers.get(b"mcp-session-id", b"").decode("latin-1")
        if scope.get("method") != "GET" or not last or not session or self.sessions.holds(session):
            return False
        refused = await self._security.validate_request(Request(scope, receive))
        if refused is not None:
            await refused(scope, receive, send)
            return True
        events: list[str] = []
        answered = False

        async def keep(event: EventMessage) -> None:
            nonlocal answered
            message = event.message
            answered = answered or isinstance(message, types.JSONRPCResponse | types.JSONRPCError)
            data = message.model_dump_json(by_alias=True, exclude_unset=True)
            events.append(f"event: message\nid: {event.event_id}\ndata: {data}\n\n")

        log = SessionEvents(self.events, session)
        stream = await log.replay_events_after(last, keep)
        if stream is None:
            return False  # unknown here too: the SDK answers 404 Session not found
        if not answered and stream != GET_STREAM_KEY and self.held_ends is not None:
            ended = await self.held_ends(session, stream)
            if ended is not None:  # its worker is gone: its result, as that worker would send
                rpc_id = int(stream) if stream.isdigit() else stream  # the SDK keys it by str()
                result = ended.model_dump(by_alias=True, mode="json", exclude_none=True)
                message = types.JSONRPCResponse(jsonrpc="2.0", id=rpc_id, result=result)
                event_id = await log.store_event(stream, message)
                data = message.model_dump_json(by_alias=True, exclude_unset=True)
                events.append(f"event: message\nid: {event_id}\ndata: {data}\n\n")
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache, no-transform"),
                    (b"mcp-session-id", session.encode("latin-1")),
                ],
            }
        )
        body = "".join(events) + f"retry: {self.retry_ms}\n\n"
        await send({"type": "http.response.body", "body": body.encode()})
        return True
