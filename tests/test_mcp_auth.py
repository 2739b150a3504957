"""Who calls /mcp: one reading of the Authorization header, per-user tokens, the shared token."""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client as DjangoClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pytest_django.fixtures import Settings

from chatbridge.author.model_context import extract_context
from chatbridge.records.mcp_tokens import issue_token, revoke_tokens
from chatbridge.records.models import McpToken, ToolSession
from tests.mcp_results import input_required, responses, text_of
from tests.mcp_site import mcp_site

pytestmark = [pytest.mark.django_db(transaction=True)]

SHARED = "shared-operator-token"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw-test-client", "version": "0"},
    },
}
ACCEPT = [("accept", "application/json, text/event-stream"), ("content-type", "application/json")]


@pytest.fixture
async def site(settings: Settings) -> AsyncIterator[str]:
    settings.CHATBRIDGE_MCP_TOKEN = SHARED
    settings.CHATBRIDGE_MCP_PUBLIC = False
    async with mcp_site() as url:
        yield url


async def post(url: str, headers: list[tuple[str, str]], body: dict[str, Any]) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(f"{url}/mcp", headers=[*ACCEPT, *headers], content=json.dumps(body))


@pytest.mark.parametrize(
    "tokens", [("wrong", SHARED), (SHARED, "wrong"), (SHARED, SHARED)], ids=str
)
async def test_two_authorization_headers_are_refused_whatever_they_hold(
    site: str, tokens: tuple[str, str]
) -> None:
    headers = [("authorization", f"Bearer {token}") for token in tokens]
    reply = await post(site, headers, INITIALIZE)
    assert reply.status_code == 400
    assert reply.json() == {
        "error": "invalid_request",
        "detail": "Send one Authorization header, not 2: "
        "a request with several is refused rather than half read.",
    }
    assert "mcp-session-id" not in reply.headers


async def test_the_shared_token_in_one_header_opens_a_session(site: str) -> None:
    reply = await post(site, [("authorization", f"Bearer {SHARED}")], INITIALIZE)
    assert reply.status_code == 200, reply.text
    assert reply.headers["mcp-session-id"]


# -- users' MCP tokens --------------------------------------------------------------------------

TOKENS = "/admin/chatbridge_chat/mcptoken/"
SESSIONS = "/admin/chatbridge_chat/toolsession/"


class CardPicker:
    """An elicitation callback that picks the first card dealt (pick_card's one question)."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.seen: list[str] = []  # the questions asked, in order
        self.hold: asyncio.Event | None = None  # set: answer only once it is set

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.seen.append(params.message)
        self.asked.set()
        if self.hold is not None:
            await self.hold.wait()
        cards = extract_context(params.requested_schema, params.message)["cards"]
        return types.ElicitResult(action="accept", content={"card": cards[0]["code"]})


@asynccontextmanager
async def client_with(url: str, token: str, **options: Any) -> AsyncIterator[Client]:
    """The official MCP client sending ``Authorization: Bearer <token>`` on every request."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with Client(transport, **options) as client:
            yield client


def admin_client(username: str = "admin") -> DjangoClient:
    admin = User.objects.create_superuser(username, f"{username}@example.com", "pw")
    browser = DjangoClient()
    browser.force_login(admin)
    return browser


def create_token(browser: DjangoClient, user: User, name: str) -> str:
    """Create a token in the admin: the token shown once on the page that follows."""
    page = browser.post(f"{TOKENS}add/", {"user": user.pk, "name": name})
    assert page.status_code == 200, page.content.decode()
    shown = page.content.decode()
    found = re.search(r'id="cb-new-token"[^>]*value="([^"]+)"', shown)
    assert found is not None, shown
    assert "Copy it now" in shown and "cannot be shown again" in shown
    return found.group(1)


def text_of_page(browser: DjangoClient, url: str) -> str:
    reply = browser.get(url)
    assert reply.status_code == 200
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", reply.content.decode())))


@pytest.fixture
async def token_site(settings: Settings) -> AsyncIterator[str]:
    """/mcp closed to anyone without a token: users' tokens are the way in."""
    settings.CHATBRIDGE_MCP_TOKEN = ""
    settings.CHATBRIDGE_MCP_PUBLIC = False
    async with mcp_site() as url:
        yield url


async def test_a_token_created_in_the_admin_calls_as_its_user_until_revoked(
    token_site: str,
) -> None:
    browser = await sync_to_async(admin_client)()
    alice = await User.objects.acreate(username="alice")
    token = await sync_to_async(create_token)(browser, alice, "alice's agent")
    assert token.startswith("cbmcp_")
    stored = await McpToken.objects.aget(user=alice)
    assert token not in {stored.token_hash, stored.prefix}  # only its hash and first letters

    async with client_with(
        token_site, token, mode="legacy", elicitation_callback=CardPicker()
    ) as client:
        result = await client.call_tool("pick_card", {"count": 3})
    assert not result.is_error, result
    row = await ToolSession.objects.aget(tool_name="pick_card")
    assert row.status == "completed"
    assert row.meta["user"] == "alice" and row.meta["token"] == "alice's agent"

    listing = await sync_to_async(text_of_page)(browser, SESSIONS)
    assert "alice (MCP token “alice's agent”)" in listing
    tokens = await sync_to_async(text_of_page)(browser, TOKENS)
    assert "alice's agent" in tokens and "live" in tokens and token not in tokens

    reply = await sync_to_async(browser.post)(
        TOKENS, {"action": "revoke", "_selected_action": [stored.pk]}
    )
    assert reply.status_code == 302
    refused = await post(token_site, [("authorization", f"Bearer {token}")], INITIALIZE)
    assert refused.status_code == 401
    assert refused.json() == {
        "error": "unauthorized",
        "detail": "This bearer token is not valid here: unknown, or revoked.",
    }
    assert refused.headers["www-authenticate"] == 'Bearer error="invalid_token"'


async def test_without_a_token_a_closed_endpoint_says_how_to_get_one(token_site: str) -> None:
    reply = await post(token_site, [], INITIALIZE)
    assert reply.status_code == 403
    assert "an administrator creates one for you in the admin" in reply.json()["detail"]


async def test_revoking_a_token_ends_the_calls_it_made_that_are_still_live(
    token_site: str,
) -> None:
    browser = await sync_to_async(admin_client)()
    bob = await User.objects.acreate(username="bob")
    token = await sync_to_async(create_token)(browser, bob, "bob's agent")
    picker = CardPicker()
    picker.hold = asyncio.Event()  # bob is asked, and has not answered yet
    async with client_with(token_site, token, mode="legacy", elicitation_callback=picker) as c:
        call = asyncio.create_task(c.call_tool("pick_card", {"count": 3}))
        await asyncio.wait_for(picker.asked.wait(), 15)
        stored = await McpToken.objects.aget(user=bob)
        reply = await sync_to_async(browser.post)(
            TOKENS, {"action": "revoke", "_selected_action": [stored.pk]}
        )
        assert reply.status_code == 302
        result = await asyncio.wait_for(call, 15)
        picker.hold.set()
    assert result.is_error
    assert text_of(result.content[0]) == (
        "An operator stopped this tool call: Aborted by operator admin: its MCP token was revoked"
    )
    row = await ToolSession.objects.aget(tool_name="pick_card")
    assert row.status == "aborted" and row.aborted_by == "operator admin"
    assert row.abort_reason == "its MCP token was revoked"


def token_of(username: str) -> str:
    return issue_token(McpToken(user=User.objects.create(username=username), name="agent"))


async def test_request_state_is_bound_to_the_user_whose_token_started_the_call(
    token_site: str,
) -> None:
    alice, mallory = [await sync_to_async(token_of)(name) for name in ("alice", "mallory")]
    modern = {"mode": "2026-07-28", "elicitation_callback": CardPicker()}
    async with client_with(token_site, alice, **modern) as client:
        first = input_required(
            await client.session.call_tool("pick_card", {"count": 3}, allow_input_required=True)
        )
    [key] = first.input_requests
    answer = responses({key: types.ElicitResult(action="accept", content={"card": "AS"})})
    async with client_with(token_site, mallory, **modern) as client:
        with pytest.raises(MCPError) as info:
            await client.session.call_tool(
                "pick_card",
                {"count": 3},
                allow_input_required=True,
                input_responses=answer,
                request_state=first.request_state,
            )
    assert info.value.error.message == "This requestState belongs to another caller."


@pytest.fixture
async def public_site(settings: Settings) -> AsyncIterator[str]:
    settings.CHATBRIDGE_MCP_TOKEN = ""
    settings.CHATBRIDGE_MCP_PUBLIC = True
    async with mcp_site() as url:
        yield url


async def test_an_open_endpoint_refuses_a_revoked_user_token_rather_than_ignore_it(
    public_site: str,
) -> None:
    token = await sync_to_async(token_of)("dave")
    await sync_to_async(revoke_tokens)(McpToken.objects.all(), "admin")
    refused = await post(public_site, [("authorization", f"Bearer {token}")], INITIALIZE)
    assert refused.status_code == 401
    assert refused.json()["detail"] == "This bearer token is not valid here: unknown, or revoked."
    anonymous = await post(public_site, [], INITIALIZE)
    chosen = await post(public_site, [("authorization", "Bearer my-own-secret")], INITIALIZE)
    assert anonymous.status_code == chosen.status_code == 200


async def test_a_legacy_session_serves_only_the_user_who_opened_it(token_site: str) -> None:
    alice, bob = [await sync_to_async(token_of)(name) for name in ("alice", "bob")]
    opened = await post(token_site, [("authorization", f"Bearer {alice}")], INITIALIZE)
    session = ("mcp-session-id", opened.headers["mcp-session-id"])
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}}
    version = ("mcp-protocol-version", "2025-11-25")
    as_bob = await post(token_site, [("authorization", f"Bearer {bob}"), session, version], ping)
    as_alice = await post(
        token_site, [("authorization", f"Bearer {alice}"), session, version], ping
    )
    assert as_bob.status_code == 404
    assert as_bob.json()["error"]["message"] == "Session not found"
    assert as_alice.status_code == 200
