"""ChatBridge's settings, with the defaults a project that sets none of them gets.

A Django project configures ChatBridge with ``CHATBRIDGE_*`` settings; every one has a default
here, so adding the app needs none of them (``docs/install.md``). Read them with ``setting()``
at the moment they are needed (tests override settings).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

__all__ = ["DEFAULTS", "setting"]

DEFAULTS: dict[str, Any] = {
    # Any litellm model string; the offline model needs no network and no key.
    "CHATBRIDGE_MODEL": "offline/chatbridge-1",
    # Dotted paths of the Plugin objects (or create_tool tools) to serve.
    "CHATBRIDGE_PLUGINS": [],
    # The dotted path of what draws a question's card in the chat around its plugin's form
    # (a function like ``chatbridge.chat.rendering.render_form``), as Django's FORM_RENDERER.
    "CHATBRIDGE_FORM_RENDERER": "chatbridge.chat.rendering.render_form",
    # Seconds a tool may wait for an answer before its session is aborted (None: never).
    "CHATBRIDGE_SESSION_IDLE_TIMEOUT": 3600.0,
    # Refused answers one question takes, on every transport (the chat's form, MCP clients,
    # tasks): the last one closes the question and the call fails, saying the answer was
    # refused that many times and why (None or 0: ask for as long as it takes). Five: enough
    # for a person to read the errors and fix a typo or two, few enough that a client sending
    # the same bad answer again and again is stopped within seconds.
    "CHATBRIDGE_MAX_REFUSED_ANSWERS": 5,
    # URL questions: seconds a one-time link stays valid; the public origin links start with
    # ("" : the origin of the page or request that started the call).
    "CHATBRIDGE_URL_LINK_TTL": 900.0,
    "CHATBRIDGE_PUBLIC_URL": "",
    # WebSocket commands a visitor's sockets (a browser session's or a user's) may send
    # together, in each worker: a steady rate per second and a burst; and those of all the
    # sockets of one client address (fresh cookies share it). A household behind one address
    # has several people; a normal person sends a command every few seconds.
    "CHATBRIDGE_WS_RATE": 10.0,
    "CHATBRIDGE_WS_BURST": 30.0,
    "CHATBRIDGE_WS_RATE_PER_ADDRESS": 50.0,
    "CHATBRIDGE_WS_BURST_PER_ADDRESS": 150.0,
    # Chat sockets (pages open) a visitor may hold at once in each worker, and all the
    # visitors of one client address (an IPv6 address's /64); None: no cap.
    "CHATBRIDGE_SOCKETS_PER_VISITOR": 30,
    "CHATBRIDGE_SOCKETS_PER_ADDRESS": 200,
    # Addresses or networks ("10.0.0.0/8") of the proxies in front of the app: on their
    # connections the client's address is read from X-Forwarded-For (never otherwise).
    "CHATBRIDGE_TRUSTED_PROXIES": [],
    # Limits per visitor (a browser session or a user; None: no limit). "Send anyway"
    # messages waiting in one chat and in all of a visitor's chats; chats busy at once with a
    # turn (a reply being written, a tool waiting for an answer: each waiting call holds
    # about 65 KiB); chats a visitor may start in an hour.
    "CHATBRIDGE_QUEUE_PER_CONVERSATION": 20,
    "CHATBRIDGE_QUEUE_PER_VISITOR": 50,
    "CHATBRIDGE_RUNNING_TURNS_PER_VISITOR": 10,
    # The same two per client address, across workers, whatever cookies its visitors bring.
    "CHATBRIDGE_QUEUE_PER_ADDRESS": 200,
    "CHATBRIDGE_RUNNING_TURNS_PER_ADDRESS": 50,
    "CHATBRIDGE_CONVERSATIONS_PER_HOUR": 100,
    # Ended tool calls (their journals, answers and log lines) are deleted after this many
    # days, by `manage.py chatbridge_sessions purge` and by each process once an hour
    # (None: kept for ever).
    "CHATBRIDGE_RETENTION_DAYS": 30,
    # /mcp: a bearer token, or open without one (None: open only with DEBUG); how long
    # requestState stays valid; how long a request notification waits for _respond.
    "CHATBRIDGE_MCP_TOKEN": "",
    "CHATBRIDGE_MCP_PUBLIC": None,
    "CHATBRIDGE_MCP_STATE_TTL": 900.0,
    "CHATBRIDGE_MCP_REQUEST_TIMEOUT": 120.0,
    # Seconds between two looks for calls no live worker holds that cannot wait for their
    # person or client (a payment received, a step whose result is not on record, an MCP
    # request gone with its worker): each is taken over here, a look that fails is tried at
    # the next (None: never look). chatbridge.cluster.takeover says what becomes of each.
    "CHATBRIDGE_COMMITMENT_SWEEP": 5.0,
    # Seconds between two reads of the answers on record (a URL question's page reports on
    # any worker and wakes the holder through the channel layer): a lost wake-up delays the
    # answer by at most this, it never loses it (chatbridge.cluster.record_watch).
    "CHATBRIDGE_RECHECK_SECONDS": 5.0,
    # Seconds the runtime's database writes and reads wait for a database that went away (a
    # restart) before they fail; a journal write that fails then stops its call.
    "CHATBRIDGE_DB_RETRY_SECONDS": 30.0,
    # Resumable MCP event streams: where each stream's events are kept for clients that
    # reconnect ("" : in this process; a redis:// URL: shared by every worker, under the
    # prefix), and how many milliseconds a client waits before it reconnects.
    "CHATBRIDGE_MCP_EVENTS_REDIS": "",
    "CHATBRIDGE_MCP_EVENTS_PREFIX": "chatbridge:mcp-events",
    "CHATBRIDGE_MCP_SSE_RETRY_MS": 1000,
    # Per MCP caller (a user's tokens, or one client address): legacy sessions open at once and
    # tool calls live at once, in each worker (None: no cap); seconds after which a legacy
    # session with no request in flight is closed (None: never).
    "CHATBRIDGE_MCP_MAX_SESSIONS_PER_CALLER": 32,
    "CHATBRIDGE_MCP_MAX_CALLS_PER_CALLER": 32,
    "CHATBRIDGE_MCP_SESSION_IDLE": 600.0,
    # OAuth authorization servers (issuer URLs) whose tokens this resource accepts: when set,
    # /.well-known/oauth-protected-resource describes /mcp (RFC 9728) and 401s point to it.
    "CHATBRIDGE_MCP_AUTHORIZATION_SERVERS": [],
    # Dotted path of the SDK TokenVerifier (object or class) that checks those servers' tokens.
    "CHATBRIDGE_MCP_TOKEN_VERIFIER": "",
    # The Content-Security-Policy of the chat's pages (django-csp DIRECTIVES; None: the
    # project's CONTENT_SECURITY_POLICY). Nothing inline runs; the socket and the guest UIs'
    # sandboxed frames are on this site; no plugin, no framing, no other base or form target.
    "CHATBRIDGE_CSP": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "frame-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}


def setting(name: str) -> Any:
    """The project's value of ``name``, or ChatBridge's default for it."""
    if name not in DEFAULTS:
        raise KeyError(f"{name} is not a ChatBridge setting; known: {', '.join(sorted(DEFAULTS))}")
    value = getattr(settings, name, DEFAULTS[name])
    if name == "CHATBRIDGE_MCP_PUBLIC" and value is None:
        return bool(settings.DEBUG)
    return value
