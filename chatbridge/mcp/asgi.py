"""``/mcp`` in the project's ASGI app: the SDK's streamable HTTP app, started lazily, guarded.

daphne runs no ASGI lifespan, so the SDK's session manager is started on the first request in
a task that lives as long as the event loop. Who may call it is explicit: a bearer token, or a
deliberate ``public`` endpoint; with neither, every request is refused with a 403 that says how
to open it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings

from chatbridge.mcp.server import McpBridge

__all__ = ["McpEndpoint", "transport_security"]

logger = logging.getLogger("chatbridge.mcp")
_CLOSED = (
    "MCP is not open on this server: set CHATBRIDGE_MCP_TOKEN to require a bearer token, or "
    "CHATBRIDGE_MCP_PUBLIC=1 to let anyone who reaches it call the tools."
)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def transport_security(allowed_hosts: Sequence[str]) -> TransportSecuritySettings:
    """DNS-rebinding protection from Django's ``ALLOWED_HOSTS`` (any port)."""
    hosts = [h.lstrip(".") for h in allowed_hosts]
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[form for h in hosts for form in (h, f"{h}:*")],
        allowed_origins=[
            form
            for h in hosts
            for scheme in ("http", "https")
            for form in (f"{scheme}://{h}", f"{scheme}://{h}:*")
        ],
    )


class McpEndpoint:
    """ASGI app for ``/mcp``: token check, lazy session manager, then the SDK's app."""

    def __init__(
        self,
        bridge: McpBridge,
        *,
        allowed_hosts: Sequence[str],
        token: str = "",
        public: bool = False,
    ) -> None:
        self.bridge = bridge
        self.public = public
        self.app = bridge.server.streamable_http_app(
            streamable_http_path="/mcp", transport_security=transport_security(allowed_hosts)
        )
        self._token_digest = hashlib.sha256(token.encode()).digest() if token else None
        self._started: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}

    async def _ensure_started(self) -> None:
        loop = asyncio.get_running_loop()
        if loop in self._started:
            return
        ready = asyncio.Event()

        async def keep_running() -> None:
            async with self.bridge.server.session_manager.run():
                ready.set()
                await asyncio.Event().wait()  # as long as the loop runs

        self._started[loop] = loop.create_task(keep_running(), name="chatbridge-mcp-sessions")
        await ready.wait()

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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if self._token_digest is None and not self.public:
                await _refuse(send, 403, "forbidden", _CLOSED)
                return
            if not self._authorised(scope):
                await _refuse(
                    send,
                    401,
                    "unauthorized",
                    "Send Authorization: Bearer <token>.",
                    [(b"www-authenticate", b"Bearer")],
                )
                return
        await self._ensure_started()
        await self.app(scope, receive, send)


async def _refuse(
    send: Send,
    status: int,
    error: str,
    detail: str,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    body = json.dumps({"error": error, "detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})
