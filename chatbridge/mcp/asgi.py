"""``/mcp`` in the project's ASGI app: the SDK's streamable HTTP app, guarded.

The process's runtime starts and closes it (``start()``/``aclose()``). Requests from browser
pages of other origins are refused. Who may call the tools is explicit: a user's MCP token
(created in the admin), the shared bearer token, a token of a configured OAuth authorization
server, or a deliberate ``public`` endpoint; with none of them, a request without a token is
refused with a 403 that says how to open it. On a public endpoint a token of the client's own
choosing binds its calls to it; a user's token that is unknown or revoked is refused there too.
A request made with a user's token is served closable: when the token is revoked, what it has
open here ends (``chatbridge.mcp.revocation``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import hmac
import json
import logging
from collections.abc import MutableMapping, Sequence
from typing import Any

import anyio
from mcp.server.streamable_http_manager import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_IDLE_TIMEOUT,
    StreamableHTTPASGIApp,
)
from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.applications import Starlette
from starlette.routing import Route

from chatbridge.asgi_types import Receive, Scope, Send
from chatbridge.mcp.callers import (
    OPERATOR,
    SCOPE_KEY,
    Caller,
    Refusal,
    TokenCheck,
    bearer_token,
    client_address,
    enter,
)
from chatbridge.mcp.caps import SessionCaps, opens_session
from chatbridge.mcp.events import EventLog, MemoryEventLog, ResumableSessions
from chatbridge.mcp.peer_watch import Peers
from chatbridge.mcp.relay_wire import worker_tag
from chatbridge.mcp.replay import ElsewhereReplay, HeldEnd
from chatbridge.mcp.resource import METADATA_PATHS, ResourceServer
from chatbridge.mcp.revocation import Revocations, RevokedAmong, Subscribe, token_of
from chatbridge.mcp.server import McpBridge
from chatbridge.mcp.session_relay import SessionRelay
from chatbridge.mcp.transport import quiet_session_ended, transport_security
from chatbridge.origins import request_origin_allowed

__all__ = ["McpEndpoint", "transport_security"]

logger = logging.getLogger("chatbridge.mcp")
_INVALID = "This bearer token is not valid here: unknown, or revoked."
_CLOSED = (
    "MCP is not open on this server without a token: send Authorization: Bearer <your MCP "
    "token> (an administrator creates one for you in the admin, under MCP tokens), or, as the "
    "operator, set CHATBRIDGE_MCP_TOKEN to require a shared bearer token, or "
    "CHATBRIDGE_MCP_PUBLIC=1 to let anyone who reaches it call the tools."
)


def _streams_open_at_once(send: Send) -> Send:
    """``send``, with an event stream's headers sent as it starts. Daphne (Twisted) writes a
    response's headers with its first body bytes, and an idle stream (a session's GET
    stream, a call before its first event) has none until sse-starlette's first ping, 15 s
    on: an empty chunk after the start sends them (uvicorn sends them anyway)."""

    async def sending(message: MutableMapping[str, Any]) -> None:
        await send(message)
        if message["type"] == "http.response.start":
            kind = dict(message.get("headers") or ()).get(b"content-type", b"")
            if kind.startswith(b"text/event-stream"):
                await send({"type": "http.response.body", "body": b"", "more_body": True})

    return sending


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


async def _refuse_with(send: Send, refusal: Refusal) -> None:
    body = {"error": refusal.error, "detail": refusal.detail}
    await _refuse(send, refusal.status, body, refusal.headers)


def _unauthorized(detail: str, *, invalid: bool = False, metadata: str | None = None) -> Refusal:
    """A 401 whose challenge (RFC 6750) says whether the token was bad, and where the resource's
    metadata is (RFC 9728) when an authorization server is configured."""
    params = ['error="invalid_token"'] if invalid else []
    params += [f'resource_metadata="{metadata}"'] if metadata else []
    challenge = ("Bearer " + ", ".join(params)) if params else "Bearer"
    return Refusal(401, "unauthorized", detail, [(b"www-authenticate", challenge.encode())])


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
        check_token: TokenCheck | None = None,
        sessions_per_caller: int | None = None,
        session_idle: float | None = DEFAULT_SESSION_IDLE_TIMEOUT,
        max_sessions: int | None = DEFAULT_MAX_SESSIONS,
        resource_server: ResourceServer | None = None,
        user_token_prefix: str = "",
        events: EventLog | None = None,
        retry_ms: int = 1000,
        peers: Peers | None = None,
        held_ends: HeldEnd | None = None,
        revoked_among: RevokedAmong | None = None,
        on_revocations: Subscribe | None = None,
    ) -> None:
        """``token``: the shared bearer token (its holder is the "operator"); ``public``: open
        to requests without a token; ``check_token``: users' own MCP tokens.
        ``sessions_per_caller``: legacy sessions one caller may hold open at once;
        ``session_idle``: seconds after which a legacy session with no request in flight is
        closed; ``max_sessions``: legacy sessions open at once in all (the SDK's cap).
        ``resource_server``: the OAuth authorization servers whose tokens are accepted.
        ``events`` keeps what each SSE stream sent, for clients that reconnect (in this
        process unless given one that workers share); ``retry_ms`` is how long they wait.
        ``peers``: the other workers, to which requests for the legacy sessions they hold are
        relayed (``mcp/session_relay.py``); without, this process is alone.
        ``revoked_among``: which users' tokens are revoked, on record; with it, what a revoked
        token has open here ends (``mcp/revocation.py``), and ``on_revocations`` wakes that
        check when a token is revoked in this process."""
        self.bridge = bridge
        self.resource_server = resource_server
        self.public = public
        self.check_token, self.user_token_prefix = check_token, user_token_prefix
        self.allowed_hosts, self.trusted_origins = list(allowed_hosts), list(trusted_origins)
        self.events = events if events is not None else MemoryEventLog()
        self.retry_ms = retry_ms
        security = transport_security(allowed_hosts, trusted_origins)
        self._security = TransportSecurityMiddleware(security)
        quiet_session_ended()
        # What Server.streamable_http_app builds, with a session manager that gives every
        # session its own scope of the event log (mcp/events.py).
        self.manager = ResumableSessions(
            bridge.server,
            self.events,
            retry_interval=retry_ms,
            security_settings=security,
            session_idle_timeout=session_idle,
            max_sessions=max_sessions,
            tag=worker_tag(peers.worker) if peers is not None else "",
        )
        self.app = Starlette(routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(self.manager))])
        # The per-caller count asks the SDK's own record of the sessions it holds (ended ones
        # leave it at once, however they end) rather than keep a copy that could drift.
        self.sessions = SessionCaps(sessions_per_caller, self.manager.holds)
        self.replay = ElsewhereReplay(
            self.manager, self.events, self._security, retry_ms, held_ends=held_ends
        )
        self.relay = None if peers is None else SessionRelay(peers, self._serve_held, self.manager)
        self.revocations = (
            Revocations(bridge.manager, revoked_among, subscribe=on_revocations)
            if revoked_among is not None
            else None
        )
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
            async with self.manager.run():
                ready.set()
                await stop.wait()

        self._runner = asyncio.create_task(run(), name="chatbridge-mcp-sessions")
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({waiting, self._runner}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if self._runner.done():
            self._runner.result()  # raises why it could not start
        if self.revocations is not None:
            self.revocations.start()

    async def aclose(self, grace: float = 3.0) -> None:
        """Let requests being answered send their responses (up to ``grace`` seconds), then
        close every MCP session and stop the session manager."""
        runner, self._runner = self._runner, None
        if runner is None or self._stop is None:
            return
        if self.revocations is not None:
            await self.revocations.aclose()
        if self._posts:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace)
        self._stop.set()
        await asyncio.wait({runner})
        if self.relay is not None:
            await self.relay.aclose()
        await self.events.aclose()

    @property
    def policy(self) -> str:
        """Who may call the tools, in words (logged at start-up)."""
        users = " or a user's MCP token" if self.check_token is not None else ""
        if self.resource_server is not None:
            users += " or a token of " + ", ".join(self.resource_server.authorization_servers)
        if self._token_digest is not None:
            return f"requires Authorization: Bearer <CHATBRIDGE_MCP_TOKEN{users}>"
        if self.public:
            return "open to anyone who reaches it (CHATBRIDGE_MCP_PUBLIC)"
        if users:
            return (
                "closed except to users' MCP tokens (or set CHATBRIDGE_MCP_TOKEN or "
                "CHATBRIDGE_MCP_PUBLIC=1)"
            )
        return "closed (set CHATBRIDGE_MCP_TOKEN or CHATBRIDGE_MCP_PUBLIC=1)"

    def log_policy(self) -> None:
        logger.info("MCP at /mcp: %s", self.policy)

    async def identify(self, scope: Scope) -> Caller:
        """Who sends this request, from its one ``Authorization`` header; ``Refusal`` if it may
        not call. Without a token it is anonymous (a public endpoint only), its caps counted
        per client address, like the shared token's holders (who are one identity)."""
        token = bearer_token(scope.get("headers") or ())
        address = client_address(scope)
        oauth = self.resource_server
        metadata = oauth.metadata_url(scope) if oauth is not None else None
        # The shared token, when set, is required even if the endpoint is also marked public.
        open_to_all = self.public and self._token_digest is None
        if token is None:
            if open_to_all:
                return Caller("", f"address:{address}", {"address": address})
            if self._token_digest is None and oauth is None:
                raise Refusal(403, "forbidden", _CLOSED)
            raise _unauthorized("Send Authorization: Bearer <token>.", metadata=metadata)
        if self._token_digest is not None and hmac.compare_digest(
            hashlib.sha256(token.encode()).digest(), self._token_digest
        ):
            return Caller(OPERATOR, f"address:{address}", {"address": address})
        found = None
        if self.check_token is not None and self._user_token_shaped(token):
            found = await self.check_token(token)
        if found is None and oauth is not None:
            found = await oauth.caller(token, scope)
        if found is None and open_to_all and oauth is None and not self._issued_here(token):
            # A token of the client's own choosing on an open endpoint: it proves nobody, but
            # binds the client's calls to it (no other anonymous caller can take them over).
            # Its caps are its address's: new tokens do not buy more room.
            digest = hashlib.sha256(token.encode()).hexdigest()[:32]
            return Caller(f"bearer:{digest}", f"address:{address}", {"address": address})
        if found is None:
            raise _unauthorized(_INVALID, invalid=True, metadata=metadata)
        return dataclasses.replace(found, meta={**found.meta, "address": address})

    def _user_token_shaped(self, token: str) -> bool:
        """Could the token be a user's MCP token? Only such a token is looked up (one read of
        the database): every token issued here starts with ``user_token_prefix``."""
        return not self.user_token_prefix or token.startswith(self.user_token_prefix)

    def _issued_here(self, token: str) -> bool:
        """Does the token look like one of this server's (a user's MCP token)? Such a token,
        unknown or revoked, is refused even on an open endpoint rather than taken as anonymous."""
        return bool(self.user_token_prefix) and token.startswith(self.user_token_prefix)

    async def _metadata(self, scope: Scope, send: Send) -> None:
        """The protected resource metadata (RFC 9728): public, readable from any page."""
        document = None
        if self.resource_server is not None and scope.get("method") in ("GET", "HEAD"):
            document = self.resource_server.document(scope)
        if document is None:
            await _refuse(send, 404, {"error": "not_found", "detail": "No such document."})
            return
        headers = [
            (b"content-type", b"application/json"),
            (b"access-control-allow-origin", b"*"),
            (b"cache-control", b"public, max-age=3600"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": document})

    async def _open_session(self, scope: Scope, receive: Receive, send: Send, quota: str) -> None:
        """A request that opens a legacy session: the session, if one opened, is ``quota``'s."""
        opened: list[str] = []

        async def watch(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                headers = dict(message.get("headers") or ())
                opened.extend(
                    [headers[b"mcp-session-id"].decode()] if b"mcp-session-id" in headers else []
                )
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            self.sessions.opened(quota, opened[0] if opened else None)

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
        if scope["type"] == "http" and scope.get("path") in METADATA_PATHS:
            await self._metadata(scope, send)
            return
        if scope["type"] == "http":
            send = _streams_open_at_once(send)
            foreign = self._foreign_origin(scope)
            if foreign is not None:
                detail = (
                    f"Requests from {foreign} are refused: only this site's own origin, or one "
                    "listed in CSRF_TRUSTED_ORIGINS, may call /mcp from a browser."
                )
                await _refuse(send, 403, {"error": "forbidden_origin", "detail": detail})
                return
            try:
                caller = await self.identify(scope)
            except Refusal as refusal:
                await _refuse_with(send, refusal)
                return
            enter(scope, caller)
            token = token_of(caller.meta)
            if token and self.revocations is not None:
                refuse = functools.partial(self._refuse_revoked, scope)
                await self.revocations.serve(token, self._route, scope, receive, send, refuse)
                return
        await self._route(scope, receive, send)

    async def _refuse_revoked(self, scope: Scope, send: Send) -> None:
        """The answer to a request whose token was revoked before anything was sent back."""
        oauth = self.resource_server
        metadata = oauth.metadata_url(scope) if oauth is not None else None
        await _refuse_with(send, _unauthorized(_INVALID, invalid=True, metadata=metadata))

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request that may call: served here, or relayed to the worker holding its session."""
        if self._runner is None or self._runner.done():
            await _refuse(send, 503, {"error": "unavailable", "detail": "MCP is not running."})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.relay is not None:
            relayed = await self.relay.forward(scope, receive, send)
            if relayed is None:
                return  # the worker holding its session answered
            receive = relayed
        if not await self.replay.serve(scope, receive, send):
            await self._answer(scope, receive, send)

    async def _serve_held(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request another worker relayed here, for a session held here (its origin checked
        and its caller identified there)."""
        if self._runner is None or self._runner.done():
            await _refuse(send, 503, {"error": "unavailable", "detail": "MCP is not running."})
            return
        await self._answer(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The SDK's answer; a POST is counted while it is answered (``aclose`` waits)."""
        if scope.get("method") != "POST":
            await self.app(scope, receive, send)  # event streams last until closed
            return
        quota = scope[SCOPE_KEY].quota if opens_session(scope) else None
        if quota is not None:
            try:
                self.sessions.admit(quota)
            except Refusal as refusal:
                await _refuse_with(send, refusal)
                return
        self._posts += 1
        self._idle.clear()
        started = False

        async def watched(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            if quota is None:
                await self.app(scope, receive, watched)
            else:
                await self._open_session(scope, receive, watched, quota)
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
