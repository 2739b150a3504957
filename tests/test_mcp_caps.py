"""Caps per MCP caller: one caller at its cap is refused in words, and nobody else notices."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from mcp.shared.exceptions import MCPError
from pytest_django.fixtures import Settings

from chatbridge.author.model_context import extract_context
from chatbridge.records.models import ToolSession
from tests.mcp_results import elicitation, input_required, responses
from tests.mcp_site import mcp_site
from tests.raw_mcp import raw_session
from tests.test_mcp_auth import ACCEPT, INITIALIZE, CardPicker, client_with, token_of

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
async def site(settings: Settings) -> AsyncIterator[str]:
    settings.CHATBRIDGE_MCP_PUBLIC = True
    settings.CHATBRIDGE_MCP_MAX_SESSIONS_PER_CALLER = 3
    settings.CHATBRIDGE_MCP_MAX_CALLS_PER_CALLER = 2
    async with mcp_site() as url:
        yield url


class Caller:
    """Raw HTTP from one client address, with one token (or none); closed by ``callers``."""

    def __init__(self, url: str, address: str = "127.0.0.1", token: str = "") -> None:
        transport = httpx2.AsyncHTTPTransport(local_address=address)
        auth = [("authorization", f"Bearer {token}")] if token else []
        self.url, self.headers = f"{url}/mcp", [*ACCEPT, *auth]
        self.http = httpx2.AsyncClient(transport=transport, timeout=30)

    async def open(self) -> httpx2.Response:
        return await self.http.post(self.url, headers=self.headers, content=json.dumps(INITIALIZE))

    async def close(self, session_id: str) -> None:
        reply = await self.http.delete(
            self.url, headers=[*self.headers, ("mcp-session-id", session_id)]
        )
        assert reply.status_code == 200, reply.text


@pytest.fixture
async def callers(site: str) -> AsyncIterator[Callable[..., Caller]]:
    made: list[Caller] = []

    def caller(address: str = "127.0.0.1", token: str = "") -> Caller:
        made.append(Caller(site, address, token))
        return made[-1]

    yield caller
    for each in made:
        await each.http.aclose()


def refused_as_too_many(reply: httpx2.Response) -> None:
    assert reply.status_code == 429
    assert reply.headers["retry-after"] == "30"
    assert reply.json() == {
        "error": "too_many_sessions",
        "detail": "You have 3 MCP sessions open, the most one caller may have "
        "(CHATBRIDGE_MCP_MAX_SESSIONS_PER_CALLER): end one (HTTP DELETE with its "
        "Mcp-Session-Id) or reuse it. Idle sessions expire by themselves.",
    }


async def test_an_address_at_its_session_cap_does_not_stop_another(
    callers: Callable[..., Caller],
) -> None:
    greedy, other = callers("127.0.0.1"), callers("127.0.0.2")
    opened = [await greedy.open() for _ in range(3)]
    assert [r.status_code for r in opened] == [200, 200, 200]
    refused_as_too_many(await greedy.open())
    refused_as_too_many(await callers(token="a-new-name").open())  # same address, same room
    assert (await other.open()).status_code == 200
    await greedy.close(opened[0].headers["mcp-session-id"])
    assert (await greedy.open()).status_code == 200  # its room is free again at once


async def test_a_user_at_the_session_cap_does_not_stop_another_user_at_the_same_address(
    callers: Callable[..., Caller],
) -> None:
    alice, bob = [await sync_to_async(token_of)(name) for name in ("alice", "bob")]
    greedy, other = callers(token=alice), callers(token=bob)
    assert [(await greedy.open()).status_code for _ in range(3)] == [200, 200, 200]
    refused_as_too_many(await greedy.open())
    assert (await other.open()).status_code == 200
    assert (await callers().open()).status_code == 200  # and anonymous callers neither


async def test_a_user_at_the_call_cap_is_told_and_another_user_is_served(site: str) -> None:
    alice, bob = [await sync_to_async(token_of)(name) for name in ("alice", "bob")]
    picker = CardPicker()
    picker.hold = asyncio.Event()  # alice's calls wait for her answers
    options: dict[str, Any] = {"mode": "legacy", "elicitation_callback": picker}
    async with client_with(site, alice, **options) as client:
        held = [asyncio.create_task(client.call_tool("pick_card", {"count": 3})) for _ in "ab"]
        await asyncio.wait_for(picker.asked.wait(), 15)
        while len(picker.seen) < 2:  # both are asked: both are live
            picker.asked.clear()
            await asyncio.wait_for(picker.asked.wait(), 15)
        with pytest.raises(MCPError) as info:
            await client.call_tool("pick_card", {"count": 3})
        async with client_with(site, bob, mode="legacy", elicitation_callback=CardPicker()) as b:
            served = await b.call_tool("pick_card", {"count": 3})
        picker.hold.set()
        done = await asyncio.gather(*held)
        again = await client.call_tool("pick_card", {"count": 3})  # room again
    assert info.value.error.code == -32029
    assert info.value.error.message == (
        "You have 2 tool calls running, the most one caller may have at once "
        "(CHATBRIDGE_MCP_MAX_CALLS_PER_CALLER): wait for one to end, or cancel one, then call "
        "again."
    )
    assert not served.is_error and not again.is_error
    assert [r.is_error for r in done] == [False, False]


IDLE = 0.5


@pytest.fixture
async def idle_site(settings: Settings) -> AsyncIterator[str]:
    settings.CHATBRIDGE_MCP_PUBLIC = True
    settings.CHATBRIDGE_MCP_MAX_SESSIONS_PER_CALLER = 1
    settings.CHATBRIDGE_MCP_SESSION_IDLE = IDLE
    async with mcp_site() as url:
        yield url


async def test_an_idle_session_is_closed_and_frees_its_callers_room(idle_site: str) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        url = f"{idle_site}/mcp"

        async def initialize() -> httpx2.Response:
            return await http.post(url, headers=ACCEPT, content=json.dumps(INITIALIZE))

        first = await initialize()
        session = [("mcp-session-id", first.headers["mcp-session-id"])]
        assert (await initialize()).status_code == 429  # its one session is open
        await asyncio.sleep(IDLE * 4)  # no request at all: the session is idle this long
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}}
        late = await http.post(url, headers=[*ACCEPT, *session], content=json.dumps(ping))
        again = await initialize()
    assert late.status_code == 404 and late.json()["error"]["message"] == "Session not found"
    assert again.status_code == 200


async def test_a_call_whose_client_vanished_ends_as_gone_when_its_session_expires(
    idle_site: str,
) -> None:
    url = f"{idle_site}/mcp"
    async with raw_session(url) as client:
        await client.request("logging/setLevel", {"level": "notice"})
        headers = {**client._headers(), "content-type": "application/json"}
        call = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "pick_card", "arguments": {"count": 3}},
        }
        async with client.http.stream("POST", url, json=call, headers=headers) as reply:
            async for line in reply.aiter_lines():
                if '"request_id"' in line:  # asked through a request notification
                    break
        # The client went away without a word: its call's stream is closed, nothing follows.
        row = await wait_for_row(lambda r: r.status not in ("running", "awaiting_elicit"))
    assert row.status == "aborted" and row.error == "the MCP client went away"


async def wait_for_row(done: Callable[[ToolSession], bool], timeout: float = 15) -> ToolSession:
    """The pick_card call's row once ``done`` holds (the server records it as the call ends)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        row = await ToolSession.objects.filter(tool_name="pick_card").afirst()
        if row is not None and done(row):
            return row
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"the call is still {row.status if row else 'not on record'}")
        await asyncio.sleep(0.05)


async def test_a_suspended_2026_call_keeps_its_place_until_it_ends(site: str) -> None:
    alice = await sync_to_async(token_of)("alice")
    modern: dict[str, Any] = {"mode": "2026-07-28", "elicitation_callback": CardPicker()}
    async with client_with(site, alice, **modern) as client:
        asked = [
            input_required(
                await client.session.call_tool("pick_card", {"count": 3}, allow_input_required=True)
            )
            for _ in "ab"
        ]
        with pytest.raises(MCPError) as info:  # both wait for answers between round trips
            await client.session.call_tool("pick_card", {"count": 3}, allow_input_required=True)
        [key] = asked[0].input_requests
        card = extract_context(None, elicitation(asked[0].input_requests[key]).message)["cards"][0]
        answer = responses(
            {key: types.ElicitResult(action="accept", content={"card": card["code"]})}
        )
        done = await client.session.call_tool(
            "pick_card",
            {"count": 3},
            allow_input_required=True,
            input_responses=answer,
            request_state=asked[0].request_state,
        )
        again = await client.session.call_tool("pick_card", {"count": 3}, allow_input_required=True)
    assert info.value.error.code == -32029
    assert isinstance(done, types.CallToolResult) and not done.is_error
    assert isinstance(again, types.InputRequiredResult)  # the ended call's place is free
