"""``/mcp`` as an OAuth 2.0 protected resource (RFC 9728), as the MCP authorization spec
(2025-06-18, 2025-11-25) has clients find its authorization server.

Served only when authorization servers are configured: the metadata document at
``/.well-known/oauth-protected-resource/mcp`` (the path-suffixed form, which the 401's
``WWW-Authenticate: Bearer resource_metadata="…"`` points to) and at the root form, which
clients try next. Tokens those servers issue are checked by a ``TokenVerifier`` (the SDK's
protocol: introspection, JWT validation…); a token issued for another resource is refused.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.http.request import split_domain_port, validate_host
from mcp.server.auth.provider import AccessToken, TokenVerifier, principal_components
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl, ValidationError

from chatbridge.mcp.callers import Caller

__all__ = ["METADATA_PATHS", "WELL_KNOWN", "ResourceServer"]

WELL_KNOWN = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"
METADATA_PATHS = (WELL_KNOWN + MCP_PATH, WELL_KNOWN)


def _same_resource(given: str, ours: str) -> bool:
    """Compared as URLs (case and default ports do not matter), a trailing slash aside."""
    try:
        return str(AnyHttpUrl(given)).rstrip("/") == str(AnyHttpUrl(ours)).rstrip("/")
    except ValidationError:
        return False


@dataclass(frozen=True)
class ResourceServer:
    """What ``/mcp`` says about itself to OAuth clients, and how it checks their tokens."""

    authorization_servers: Sequence[str]
    allowed_hosts: Sequence[str]
    public_url: str = ""  # CHATBRIDGE_PUBLIC_URL; else the request's own scheme and host
    verifier: TokenVerifier | None = None
    name: str = "ChatBridge"

    def resource(self, scope: Mapping[str, Any]) -> str | None:
        """This endpoint's resource identifier (its canonical URL), or None for a request
        whose Host this site does not serve (the document must not echo any Host)."""
        if self.public_url:
            return self.public_url.rstrip("/") + MCP_PATH
        headers = dict(scope.get("headers") or ())
        host = headers.get(b"host", b"").decode("latin-1")
        domain, _ = split_domain_port(host)
        if not domain or not validate_host(domain, list(self.allowed_hosts)):
            return None
        return f"{scope.get('scheme', 'http')}://{host}{MCP_PATH}"

    def metadata_url(self, scope: Mapping[str, Any]) -> str | None:
        resource = self.resource(scope)
        return str(build_resource_metadata_url(AnyHttpUrl(resource))) if resource else None

    def document(self, scope: Mapping[str, Any]) -> bytes | None:
        resource = self.resource(scope)
        if resource is None:
            return None
        metadata = ProtectedResourceMetadata(
            resource=AnyHttpUrl(resource),
            authorization_servers=[AnyHttpUrl(s) for s in self.authorization_servers],
            resource_name=self.name,
        )
        return metadata.model_dump_json(exclude_none=True).encode()

    async def caller(self, token: str, scope: Mapping[str, Any]) -> Caller | None:
        """The caller a token of the authorization server proves: valid, unexpired, issued for
        this resource (when it says which); None otherwise."""
        if self.verifier is None:
            return None
        access = await self.verifier.verify_token(token)
        if access is None or (access.expires_at and access.expires_at < time.time()):
            return None
        resource = self.resource(scope)
        if access.resource is not None and not (
            resource and _same_resource(access.resource, resource)
        ):
            return None
        return _oauth_caller(access)


def _oauth_caller(access: AccessToken) -> Caller:
    client_id, issuer, subject = principal_components(access)
    who = subject or client_id
    identity = f"oauth:{who}@{issuer}" if issuer else f"oauth:{who}"
    token = f"OAuth client {client_id}" + (f" of {issuer}" if issuer else "")
    return Caller(identity, identity, {"user": who, "token": token})
