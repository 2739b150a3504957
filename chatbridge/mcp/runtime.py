"""The process's MCP endpoint, configured from the Django settings."""

from __future__ import annotations

import hashlib
from functools import cache

from asgiref.sync import sync_to_async
from django.conf import settings
from django.template.loader import render_to_string

from chatbridge.chat.models import ToolSession
from chatbridge.chat.registry import get_registry, get_ui_resources
from chatbridge.chat.runtime import get_session_manager
from chatbridge.chat.workers import ensure_listener
from chatbridge.mcp.asgi import McpEndpoint
from chatbridge.mcp.rounds import StoredCall
from chatbridge.mcp.server import McpBridge, McpSettings

__all__ = ["DjangoCallStore", "get_mcp_endpoint", "state_key"]


def state_key(secret: str) -> bytes:
    """The requestState sealing key derived from a project secret."""
    return hashlib.sha256(b"chatbridge.mcp.request-state:" + secret.encode()).digest()


def _load(call_id: str) -> StoredCall | None:
    row = ToolSession.objects.filter(pk=call_id).first()
    if row is None:
        return None
    journal = row.journal_entries()
    return StoredCall(
        row.tool_name, row.arguments, journal, row.status, row.result, row.error, row.aborted_by
    )


class DjangoCallStore:
    """MCP calls as the recorder persisted them: resumed by replay after a restart."""

    async def load(self, call_id: str) -> StoredCall | None:
        return await sync_to_async(_load)(call_id)


@cache
def get_mcp_endpoint() -> McpEndpoint:
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    bridge = McpBridge(
        get_registry(),
        get_session_manager(),
        McpSettings(
            state_keys=[state_key(s) for s in secrets],
            state_ttl=settings.CHATBRIDGE_MCP_STATE_TTL,
            request_timeout=settings.CHATBRIDGE_MCP_REQUEST_TIMEOUT,
        ),
        render_ui=lambda uri: render_to_string(get_ui_resources()[uri], {}),
        store=DjangoCallStore(),
        on_call=ensure_listener,  # aborts reach MCP calls (the lead moves it into the runtime)
    )
    return McpEndpoint(
        bridge,
        allowed_hosts=settings.ALLOWED_HOSTS,
        trusted_origins=settings.CSRF_TRUSTED_ORIGINS,
        token=settings.CHATBRIDGE_MCP_TOKEN,
        public=settings.CHATBRIDGE_MCP_PUBLIC,
    )
