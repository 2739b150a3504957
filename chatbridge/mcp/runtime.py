"""Building the process's MCP endpoint from the Django settings (the runtime owns it)."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.template.loader import render_to_string

from chatbridge.chat.registry import get_registry, get_ui_resources
from chatbridge.core.sampling import LiteLLMSampler
from chatbridge.core.sessions import SessionManager
from chatbridge.mcp.asgi import McpEndpoint
from chatbridge.mcp.server import McpBridge, McpSettings

__all__ = ["build_mcp_endpoint", "state_key"]


def state_key(secret: str) -> bytes:
    """The requestState sealing key derived from a project secret."""
    return hashlib.sha256(b"chatbridge.mcp.request-state:" + secret.encode()).digest()


def build_mcp_endpoint(manager: SessionManager) -> McpEndpoint:
    """The ``/mcp`` endpoint; its tool calls are sessions of ``manager``."""
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    bridge = McpBridge(
        get_registry(),
        LiteLLMSampler(settings.CHATBRIDGE_MODEL),
        McpSettings(
            state_keys=[state_key(s) for s in secrets],
            state_ttl=settings.CHATBRIDGE_MCP_STATE_TTL,
            request_timeout=settings.CHATBRIDGE_MCP_REQUEST_TIMEOUT,
        ),
        render_ui=lambda uri: render_to_string(get_ui_resources()[uri], {}),
    )
    return McpEndpoint(
        bridge,
        allowed_hosts=settings.ALLOWED_HOSTS,
        trusted_origins=settings.CSRF_TRUSTED_ORIGINS,
        token=settings.CHATBRIDGE_MCP_TOKEN,
        public=settings.CHATBRIDGE_MCP_PUBLIC,
    )
