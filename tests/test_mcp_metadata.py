"""OAuth 2.0 Protected Resource Metadata (RFC 9728) for /mcp, as the MCP authorization spec
(2025-06-18, 2025-11-25) has clients discover it; tokens of the authorization server it names."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest
from mcp.client.auth.utils import (
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
)
from mcp.server.auth.provider import AccessToken
from mcp.shared.auth import ProtectedResourceMetadata
from pytest_django.fixtures import Settings

from chatbridge.records.models import ToolSession
from tests.mcp_site import mcp_site
from tests.test_mcp_auth import INITIALIZE, CardPicker, client_with, post

pytestmark = [pytest.mark.django_db(transaction=True)]

ISSUER = "https://auth.example.com"
AUDIENCE: list[str] = []  # the resource the stand-in server issues its tokens for


class AuthorizationServer:
    """A stand-in for the authorization server's token introspection (the SDK's
    ``TokenVerifier``): it issued one token, to carol through the app "agent-app"."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token not in ("issued-to-carol", "issued-for-elsewhere"):
            return None
        resource = AUDIENCE[0] if token == "issued-to-carol" else "https://elsewhere.example/mcp"
        return AccessToken(
            token=token,
            client_id="agent-app",
            scopes=["tools"],
            subject="carol",
            resource=resource,
            claims={"iss": ISSUER},
        )


@pytest.fixture
async def plain_site(settings: Settings) -> AsyncIterator[str]:
    settings.CHATBRIDGE_MCP_TOKEN = "shared"
    settings.CHATBRIDGE_MCP_PUBLIC = False
    async with mcp_site() as url:
        yield url


@pytest.fixture
async def oauth_site(settings: Settings) -> AsyncIterator[str]:
    settings.CHATBRIDGE_MCP_TOKEN = ""
    settings.CHATBRIDGE_MCP_PUBLIC = False
    settings.CHATBRIDGE_MCP_AUTHORIZATION_SERVERS = [ISSUER]
    settings.CHATBRIDGE_MCP_TOKEN_VERIFIER = "tests.test_mcp_metadata.AuthorizationServer"
    async with mcp_site() as url:
        AUDIENCE[:] = [f"{url}/mcp"]
        yield url


async def test_without_an_authorization_server_the_401_stays_plain_and_nothing_is_published(
    plain_site: str,
) -> None:
    refused = await post(plain_site, [], INITIALIZE)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    async with httpx2.AsyncClient() as http:
        for path in (
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource",
        ):
            assert (await http.get(f"{plain_site}{path}")).status_code == 404


async def test_a_client_discovers_the_metadata_from_the_401(oauth_site: str) -> None:
    refused = await post(oauth_site, [], INITIALIZE)
    assert refused.status_code == 401
    pointed = extract_resource_metadata_from_www_auth(refused)
    assert pointed == f"{oauth_site}/.well-known/oauth-protected-resource/mcp"
    urls = build_protected_resource_metadata_discovery_urls(pointed, f"{oauth_site}/mcp")
    async with httpx2.AsyncClient() as http:
        documents = [await http.get(url) for url in dict.fromkeys(urls)]  # both well-known forms
    assert [d.status_code for d in documents] == [200, 200]
    for document in documents:
        metadata = ProtectedResourceMetadata.model_validate_json(document.content)
        assert str(metadata.resource) == f"{oauth_site}/mcp"
        assert [str(s) for s in metadata.authorization_servers] == [f"{ISSUER}/"]
        assert metadata.bearer_methods_supported == ["header"]
        assert document.headers["access-control-allow-origin"] == "*"


async def test_a_token_of_the_authorization_server_calls_as_its_subject(oauth_site: str) -> None:
    async with client_with(
        oauth_site, "issued-to-carol", mode="legacy", elicitation_callback=CardPicker()
    ) as client:
        result = await client.call_tool("pick_card", {"count": 3})
    assert not result.is_error
    row = await ToolSession.objects.aget(tool_name="pick_card")
    assert (
        row.meta["user"] == "carol" and row.meta["token"] == f"OAuth client agent-app of {ISSUER}"
    )


async def test_a_token_issued_for_another_resource_is_refused(oauth_site: str) -> None:
    refused = await post(oauth_site, [("authorization", "Bearer issued-for-elsewhere")], INITIALIZE)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == (
        f'Bearer error="invalid_token", resource_metadata="{oauth_site}/.well-known/'
        'oauth-protected-resource/mcp"'
    )
