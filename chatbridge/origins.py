"""Which web pages may open a chat socket, or call ``/mcp``, with a browser's credentials.

Channels' ``AllowedHostsOriginValidator`` compares only the Origin's host with
``ALLOWED_HOSTS``: a page served from another port of the same host (any other local app,
``http://127.0.0.1:9999``) could open a socket carrying the user's cookies. Here the Origin must
be the request's own origin, host and port, or be listed in ``CSRF_TRUSTED_ORIGINS``, and the
request's host must be in ``ALLOWED_HOSTS`` either way (as Django's own host check asks).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from urllib.parse import urlsplit

from asgiref.sync import markcoroutinefunction
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from chatbridge.asgi_types import ASGIApp, Receive, Scope, Send
from chatbridge.forwarded import use_forwarded_client

__all__ = ["SameOriginValidator", "origin_allowed", "request_origin_allowed"]

logger = logging.getLogger("chatbridge.chat")


# A page's origin says http or https; the request it makes says ws, wss, http or https, and
# behind a proxy that ends TLS the server sees ws for a page on https. So schemes are not
# compared; a port is, once a scheme's default port is dropped.
_DEFAULT_PORTS = {"http": "80", "ws": "80", "https": "443", "wss": "443"}


def _host_port(netloc: str, scheme: str) -> tuple[str, str]:
    """(lowercased host, port or "" for the scheme's default); ("", "") if malformed."""
    domain, port = split_domain_port(netloc)
    return domain, "" if port == _DEFAULT_PORTS.get(scheme) else port


def _allowed_hosts() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:  # what Django itself allows in this case
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def origin_allowed(
    origin: str | None,
    host: str | None,
    scheme: str,
    *,
    allowed_hosts: Sequence[str],
    trusted_origins: Sequence[str],
) -> bool:
    """May a page of ``origin`` make this request, sent to ``host`` (its Host header) over
    ``scheme`` (ws, wss, http or https)? A missing or opaque (``null``) Origin may not."""
    if not origin or not host:
        return False
    domain, port = _host_port(host, scheme)
    if not domain or not validate_host(domain, allowed_hosts):
        return False  # also what stops a rebound DNS name from passing as "same origin"
    if origin.lower() in {t.lower().rstrip("/") for t in trusted_origins}:
        return True
    parts = urlsplit(origin)
    if parts.scheme.lower() not in ("http", "https") or parts.path or parts.query:
        return False
    return _host_port(parts.netloc, parts.scheme.lower()) == (domain, port)


def _header(scope: Scope, name: bytes) -> str | None:
    values = [v for k, v in scope.get("headers") or () if k == name]
    return values[0].decode("latin-1") if len(values) == 1 else None  # two Origins: neither


def request_origin_allowed(
    scope: Scope, allowed_hosts: Sequence[str], trusted_origins: Sequence[str]
) -> bool:
    """``origin_allowed`` for an ASGI request's own headers (``X-Forwarded-Host`` when Django's
    ``USE_X_FORWARDED_HOST`` says the proxy sets it)."""
    host = _header(scope, b"host")
    if getattr(settings, "USE_X_FORWARDED_HOST", False):
        host = _header(scope, b"x-forwarded-host") or host
    return origin_allowed(
        _header(scope, b"origin"),
        host,
        str(scope.get("scheme") or ("ws" if scope["type"] == "websocket" else "http")),
        allowed_hosts=allowed_hosts,
        trusted_origins=trusted_origins,
    )


class SameOriginValidator:
    """ASGI middleware for WebSocket routes: only the site's own pages, or pages of an origin
    in ``CSRF_TRUSTED_ORIGINS``, may connect; others are closed before the handshake (HTTP
    403). The settings are read on each connection. Behind a trusted proxy the socket's scope
    gets the client's address first (``chatbridge.forwarded``)."""

    def __init__(self, application: ASGIApp) -> None:
        self.application = application

    @markcoroutinefunction  # an ASGI 3 application, though it returns the awaitable
    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """The socket's application, or its denial: decided from the scope alone, so this
        hands the socket on instead of staying under every message it receives."""
        if scope["type"] != "websocket":
            raise ValueError(f"SameOriginValidator guards WebSockets, not {scope['type']!r}.")
        use_forwarded_client(scope)
        trusted = list(getattr(settings, "CSRF_TRUSTED_ORIGINS", []))
        if request_origin_allowed(scope, _allowed_hosts(), trusted):
            return self.application(scope, receive, send)
        logger.warning(
            "refused socket from origin %r to host %r",
            _header(scope, b"origin"),
            _header(scope, b"host"),
        )
        denial: Awaitable[None] = WebsocketDenier()(scope, receive, send)
        return denial
