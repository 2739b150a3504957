"""``/mcp`` in the project's ASGI app: the SDK's streamable HTTP app, guarded.

The process's runtime starts and closes it (``start()``/``aclose()``). Requests from browser
pages of other origins are refused. Who may call the tools is explicit: a bearer token, or a
deliberate ``public`` endpoint; with neither, every request is refused with a 403 that says how
to open it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import anyio
from mcp.server.streamable_http import EventMessage
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from chatbridge.chat.origins import request_origin_allowed
from chatbridge.mcp.events import EventLog, MemoryEventLog, ResumableSessions, SessionEvents
from chatbridge.mcp.server import McpBridge

__all__ = ["McpEndpoint", "transport_security"]

logger = logging.getLogger("chatbridge.mcp")


class _SessionEndedFilter(logging.Filter):
    """Drops the SDK's ERROR traceback for the same race (it logs before raising): a closed
    stream under a POST means its session was just ended, which is no error."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (
            isinstance(error, anyio.ClosedResourceError)
            and record.getMessage() == "Error handling POST request"
        )


_SDK_TRANSPORT_LOG = logging.getLogger("mcp.server.streamable_http")
_SESSION_ENDED = _SessionEndedFilter()
_CLOSED = (
    "MCP is not open on this server: set CHATBRIDGE_MCP_TOKEN to require a bearer token, or "
    "CHATBRIDGE_MCP_PUBLIC=1 to let anyone who reaches it call the tools."
)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def transport_security(
    allowed_hosts: Sequence[str], trusted_origins: Sequence[str] = ()
) -> TransportSecuritySettings:
    """The SDK's DNS-rebinding protection from Django's ``ALLOWED_HOSTS`` (any port) and
    ``CSRF_TRUSTED_ORIGINS``. ``McpEndpoint`` checks origins more strictly (the port too)
    before the SDK sees a request; the SDK's checks stay as a second line, and for ``Host``."""
    hosts = [h.lstrip(".") for h in allowed_hosts]
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[form for h in hosts for form in (h, f"{h}:*")],
        allowed_origins=[
            *(
                form
                for h in hosts
                for scheme in ("http", "https")
                for form in (f"{scheme}://{h}", f"{scheme}://{h}:*")
            ),
            *(form for o in trusted_origins for form in (o.rstrip("/"), o.rstrip("/").lower())),
        ],
    )


async def _refuse(
    send: Send, status: int, body: dict[str, str], headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


class McpEndpoint:
    """ASGI app for ``/mcp``: origin and token checks, lazy session manager, the SDK's app."""

    def __init__(
        self,
        bridge: McpBridge,
        *,
        allowed_hosts: Sequence[str],
        trusted_origins: Sequence[str] = (),
        token: str = "",
        public: bool = False,
        events: EventLog | None = None,
        retry_ms: int = 1000,
    ) -> None:
        """``events`` keeps what each SSE stream sent, for clients that reconnect (in this
        process unless given one that workers share); ``retry_ms`` is how long they wait."""
        self.bridge = bridge
        self.public = public
        self.allowed_hosts, self.trusted_origins = list(allowed_hosts), list(trusted_origins)
        self.events = events if events is not None else MemoryEventLog()
        self.retry_ms = retry_ms
        security = transport_security(allowed_hosts, trusted_origins)
        self._security = TransportSecurityMiddleware(security)
        if _SESSION_ENDED not in _SDK_TRANSPORT_LOG.filters:
            _SDK_TRANSPORT_LOG.addFilter(_SESSION_ENDED)
        # What Server.streamable_http_app builds, with a session manager that gives every
        # session its own scope of the event log (mcp/events.py).
        self.sessions = ResumableSessions(
            bridge.server, self.events, retry_interval=retry_ms, security_settings=security
        )
        self.app = Starlette(routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(self.sessions))])
        self._token_digest = hashlib.sha256(token.encode()).digest() if token else None
        self._runner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._posts = 0  # requests (tool calls and the like) being answered
        self._idle = asyncio.Event()
        self._idle.set()

    async def start(self) -> None:
        """Run the SDK's session manager in a task of its own until ``aclose()``.

        Its task group must be entered and left by one task, and the SDK's worker threads
        stop when that task ends: a server that never ends it never exits.
        """
        if self._runner is not None:
            raise RuntimeError("this MCP endpoint was started already")
        ready = asyncio.Event()
        self._stop = asyncio.Event()
        stop = self._stop

        async def run() -> None:
            async with self.sessions.run():
                ready.set()
                await stop.wait()

        self._runner = asyncio.create_task(run(), name="chatbridge-mcp-sessions")
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({waiting, self._runner}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if self._runner.done():
            self._runner.result()  # raises why it could not start

    async def aclose(self, grace: float = 3.0) -> None:
        """Let requests being answered send their responses (up to ``grace`` seconds), then
        close every MCP session and stop the session manager."""
        runner, self._runner = self._runner, None
        if runner is None or self._stop is None:
            return
        if self._posts:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace)
        self._stop.set()
        await asyncio.wait({runner})
        await self.events.aclose()

    @property
    def policy(self) -> str:
        """Who may call the tools, in words (logged at start-up)."""
        if self._token_digest is not None:
            return "requires Authorization: Bearer <CHATBRIDGE_MCP_TOKEN>"
        if self.public:
            return "open to anyone who reaches it (CHATBRIDGE_MCP_PUBLIC)"
        return "closed (set CHATBRIDGE_MCP_TOKEN or CHATBRIDGE_MCP_PUBLIC=1)"

    def log_policy(self) -> None:
        logger.info("MCP at /mcp: %s", self.policy)

    def _authorised(self, scope: Scope) -> bool:
        if self._token_digest is None:
            return True
        header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        scheme, _, token = header.partition(" ")
        given = hashlib.sha256(token.strip().encode()).digest()
        return scheme.lower() == "bearer" and hmac.compare_digest(given, self._token_digest)

    def _foreign_origin(self, scope: Scope) -> str | None:
        """The Origin of a browser page that may not call us; None if allowed or absent
        (MCP clients that are not browsers send none)."""
        origins = [v.decode("latin-1") for k, v in scope.get("headers") or () if k == b"origin"]
        if not origins:
            return None
        if request_origin_allowed(scope, self.allowed_hosts, self.trusted_origins):
            return None
        return ", ".join(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            foreign = self._foreign_origin(scope)
            if foreign is not None:
                detail = (
                    f"Requests from {foreign} are refused: only this site's own origin, or one "
                    "listed in CSRF_TRUSTED_ORIGINS, may call /mcp from a browser."
                )
                await _refuse(send, 403, {"error": "forbidden_origin", "detail": detail})
                return
            if self._token_digest is None and not self.public:
                await _refuse(send, 403, {"error": "forbidden", "detail": _CLOSED})
                return
            if not self._authorised(scope):
                detail = "Send Authorization: Bearer <token>."
                body = {"error": "unauthorized", "detail": detail}
                await _refuse(send, 401, body, [(b"www-authenticate", b"Bearer")])
                return
        if self._runner is None or self._runner.done():
            await _refuse(send, 503, {"error": "unavailable", "detail": "MCP is not running."})
            return
        if scope["type"] == "http" and await self._replay_elsewhere(scope, receive, send):
            return
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)  # event streams last until closed
            return
        self._posts += 1
        self._idle.clear()
        started = False

        async def watched(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except anyio.ClosedResourceError:
            # The SDK's race (mcp 2.3.0): a message POSTed while its session is being ended
            # (a client cancelling a call, then DELETE at once) meets closed streams after its
            # 202, and the SDK raises out of the request. The session is gone: nothing to do.
            logger.info("an MCP message arrived as its session ended; dropped")
            if not started:
                await _refuse(send, 404, {"error": "not_found", "detail": "Session not found"})
        finally:
            self._posts -= 1
            if not self._posts:
                self._idle.set()

    async def _replay_elsewhere(self, scope: Scope, receive: Receive, send: Send) -> bool:
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

        async def keep(event: EventMessage) -> None:
            data = event.message.model_dump_json(by_alias=True, exclude_unset=True)
            events.append(f"event: message\nid: {event.event_id}\ndata: {data}\n\n")

        if await SessionEvents(self.events, session).replay_events_after(last, keep) is None:
            return False  # unknown here too: the SDK answers 404 Session not found
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
