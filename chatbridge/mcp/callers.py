"""Who is calling ``/mcp``: the ``Authorization`` header read once, and whom it proves.

The endpoint reads the header here, once, before anything else sees the request; the result
(a ``Caller``) travels in the ASGI scope to the tool calls, which bind ``requestState``, task
ids and ``_respond`` requests to ``Caller.identity``. Nothing else reads the header: a request
whose header says two things (two ``Authorization`` headers) is refused, never half read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext

from chatbridge.author.exceptions import ChatBridgeError

__all__ = [
    "OPERATOR",
    "SCOPE_KEY",
    "Caller",
    "Refusal",
    "TokenCheck",
    "bearer_token",
    "call_meta",
    "caller_of",
    "client_address",
    "enter",
    "identity_of",
    "quota_of",
]

SCOPE_KEY = "chatbridge.mcp.caller"
OPERATOR = "operator"  # the identity of whoever holds the shared CHATBRIDGE_MCP_TOKEN


@dataclass(frozen=True)
class Caller:
    """Who a request comes from.

    ``identity`` binds what a call hands out (``requestState``, task ids, request ids) and the
    legacy MCP session: "user:<pk>" for a user's token, "operator" for the shared token, ""
    for an anonymous caller of a public endpoint. ``quota`` is whose caps a request counts
    against: the user, or the client's address when the identity does not tell callers
    apart. ``meta`` is kept with each call (the admin shows it).
    """

    identity: str
    quota: str
    meta: Mapping[str, str] = field(default_factory=dict)


# A user's MCP token → its caller (its quota is the user), or None if unknown or revoked.
TokenCheck = Callable[[str], Awaitable[Caller | None]]


class Refusal(ChatBridgeError):
    """A request refused before it reaches MCP: an HTTP status and a body in words."""

    def __init__(
        self, status: int, error: str, detail: str, headers: Iterable[tuple[bytes, bytes]] = ()
    ) -> None:
        self.status, self.error, self.detail = status, error, detail
        self.headers = list(headers)
        super().__init__(detail)


def bearer_token(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The bearer token of a request, or None without an ``Authorization`` header.

    ``Refusal`` (400) for several headers, for another scheme or an empty token: a request
    must not mean one thing to the check and another to whoever reads it next.
    """
    values = [v for k, v in headers if k.lower() == b"authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise Refusal(
            400,
            "invalid_request",
            f"Send one Authorization header, not {len(values)}: a request with several is "
            "refused rather than half read.",
        )
    scheme, _, token = values[0].decode("latin-1").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Refusal(
            400,
            "invalid_request",
            "The Authorization header must be 'Bearer <token>' (RFC 6750).",
        )
    return token


def client_address(scope: Mapping[str, Any]) -> str:
    """The client's address as the server saw it (behind a proxy: what the server was told
    to trust, e.g. uvicorn ``--proxy-headers``)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def enter(scope: dict[str, Any] | Any, caller: Caller) -> None:
    """Put ``caller`` in the request's scope. A caller with an identity is also the SDK's
    ``AuthenticatedUser``: its session manager then serves a legacy MCP session only to
    requests of the identity that opened it (others get "Session not found")."""
    scope[SCOPE_KEY] = caller
    if caller.identity:
        token = AccessToken(token="", client_id=caller.identity, scopes=[])
        scope["user"] = AuthenticatedUser(token)


def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller | None:
    """The caller of the HTTP request that carried ``ctx``'s message (None off HTTP)."""
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    caller = scope.get(SCOPE_KEY) if isinstance(scope, Mapping) else None
    return caller if isinstance(caller, Caller) else None


def call_meta(ctx: ServerRequestContext[Any, Any]) -> dict[str, str]:
    """What a call keeps about its caller (its user and token, its address): the admin shows
    whose call it is, and revoking a token finds the calls made with it."""
    caller = caller_of(ctx)
    return dict(caller.meta) if caller is not None else {}


def identity_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """Who is calling (``Caller.identity``: "user:<pk>", "operator"…); "" when anonymous or
    off HTTP. What a call hands out is bound to it."""
    caller = caller_of(ctx)
    return caller.identity if caller is not None else ""


def quota_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """Whose caps a call counts against (``Caller.quota``); "" off HTTP."""
    caller = caller_of(ctx)
    return caller.quota if caller is not None else ""
