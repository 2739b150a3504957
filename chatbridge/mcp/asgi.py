"""``/mcp`` in the project's ASGI app: the SDK's streamable HTTP app, started lazily, guarded.

daphne runs no ASGI lifespan, so the SDK's session manager is started on the first request in
a task that lives as long as the event loop. An optional bearer token guards the endpoint.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings

from chatbridge.mcp.server import McpBridge

__all__ = ["McpEndpoint", "transport_security"]

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

    def __init__(self, bridge: McpBridge, *, allowed_hosts: Sequence[str], token: str = "") -> None:
        self.bridge = bridge
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

    def _authorised(self, scope: Scope) -> bool:
        if self._token_digest is None:
            return True
        header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        scheme, _, token = header.partition(" ")
        given = hashlib.sha256(token.strip().encode()).digest()
        return scheme.lower() == "bearer" and hmac.compare_digest(given, self._token_digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._authorised(scope):
            body = json.dumps(
                {"error": "unauthorized", "detail": "Send Authorization: Bearer <token>."}
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b"Bearer"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body.encode()})
            return
        await self._ensure_started()
        await self.app(scope, receive, send)
