"""URL-mode questions (``ctx.elicit_url``) over MCP: every path, and clients that cannot take
them (client/elicitation, URL mode; basic/patterns/mrtr)."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, ClientSession
from pydantic import BaseModel

from chatbridge import ElicitAction, PluginRegistry, SessionManager, create_mcp_tool, make_plugin
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.mcp.modes import declared_modes
from chatbridge.mcp.server import McpBridge, McpSettings
from tests.mcp_results import elicitation, responses, text_of
from tests.pages import pay, with_pages
from tests.raw_mcp import raw_session
from tests.test_mcp import FLIGHTS, ROUTE, free_seat

MODERN = "2026-07-28"
SIGNED = {"token": "signed-on-the-page"}


class Signed(BaseModel):
    token: str


async def sign(params: Any, ctx: Any) -> dict[str, Any]:
    answer = await ctx.elicit_url("sign", message="Sign the form on its page")
    if not answer.accepted:
        return {"signed": False, "action": answer.action}
    return {"signed": True, "token": answer.content.token}


async def sign_page(request: Any, question: Any) -> Any:  # served by the site; unused here
    raise AssertionError("the tests complete the page in process")


def signing_bridge(url_wait: float = 20.0) -> McpBridge:
    tool = create_mcp_tool("sign").elicits(sign=Signed).execute(sign)
    return McpBridge(
        PluginRegistry([make_plugin(tool).on_url_page(sign=sign_page).build()]),
        with_pages(SessionManager(sampler=LiteLLMSampler("offline/mcp"))),
        McpSettings(state_keys=[b"k" * 32], url_wait=url_wait),
    )


class Consenting:
    """An elicitation callback that consents at once and hands the link to the test."""

    def __init__(self, action: ElicitAction = "accept") -> None:
        self.action = action
        self.asked: asyncio.Queue[types.ElicitRequestURLParams] = asyncio.Queue()

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.put_nowait(params)
        return types.ElicitResult(action=self.action)


async def test_a_pushed_url_question_waits_for_its_page_and_reports_completion() -> None:
    person = Consenting()
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    async with Client(
        signing_bridge().server,
        mode="legacy",
        elicitation_callback=person,
        message_handler=on_message,
    ) as client:
        call = asyncio.create_task(client.call_tool("sign", {}))
        asked = await asyncio.wait_for(person.asked.get(), 10)
        assert (asked.mode, asked.message) == ("url", "Sign the form on its page")
        assert asked.elicitation_id.startswith("sign:sign:mcp_")
        assert asked.url.startswith("http://pages-") and "/elicit/" in asked.url
        assert not call.done()  # consent is not an answer: the call waits for the page
        await pay(asked.url, SIGNED)
        result = await asyncio.wait_for(call, 10)
    assert result.structured_content == {"signed": True, "token": "signed-on-the-page"}
    completions = [
        m.params.elicitation_id for m in seen if isinstance(m, types.ElicitCompleteNotification)
    ]
    assert completions == [asked.elicitation_id]


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_declining_a_pushed_url_question_reaches_the_tool(action: ElicitAction) -> None:
    async with Client(
        signing_bridge().server, mode="legacy", elicitation_callback=Consenting(action)
    ) as client:
        result = await client.call_tool("sign", {})
    assert result.structured_content == {"signed": False, "action": action}


async def test_a_round_trip_url_question_goes_on_once_its_page_is_done() -> None:
    async with Client(
        signing_bridge(url_wait=0.2).server, mode=MODERN, elicitation_callback=Consenting()
    ) as client:
        first = await client.session.call_tool("sign", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        [(key, request)] = first.input_requests.items()
        assert key.startswith("sign:sign:mcp_")
        params = elicitation(request)
        assert isinstance(params, types.ElicitRequestURLParams)
        assert (params.mode, params.message) == ("url", "Sign the form on its page")
        consent = responses({key: types.ElicitResult(action="accept")})
        waiting = await client.session.call_tool(
            "sign",
            {},
            allow_input_required=True,
            input_responses=consent,
            request_state=first.request_state,
        )
        # Nobody has been to the page: wait and retry with the state alone.
        assert isinstance(waiting, types.InputRequiredResult)
        assert not waiting.input_requests and waiting.request_state
        await pay(params.url, SIGNED)
        done = await client.session.call_tool(
            "sign", {}, allow_input_required=True, request_state=waiting.request_state
        )
    assert isinstance(done, types.CallToolResult)
    assert done.structured_content == {"signed": True, "token": "signed-on-the-page"}


async def test_the_sdk_client_pays_through_a_round_trip_by_itself() -> None:
    async def pay_then_consent(context: Any, params: Any) -> types.ElicitResult:
        await pay(params.url, SIGNED)
        return types.ElicitResult(action="accept")

    async with Client(
        signing_bridge().server, mode=MODERN, elicitation_callback=pay_then_consent
    ) as client:
        result = await client.call_tool("sign", {})
    assert result.structured_content == {"signed": True, "token": "signed-on-the-page"}


async def test_declining_a_round_trip_url_question_reaches_the_tool() -> None:
    async with Client(
        signing_bridge().server, mode=MODERN, elicitation_callback=Consenting("decline")
    ) as client:
        result = await client.call_tool("sign", {})
    assert result.structured_content == {"signed": False, "action": "decline"}


async def test_a_client_that_cannot_elicit_gets_the_link_in_a_request_notification() -> None:
    requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            requests.put_nowait(params.data)

    async with Client(signing_bridge().server, mode="legacy", logging_callback=on_log) as client:
        call = asyncio.create_task(client.call_tool("sign", {}))
        request = await asyncio.wait_for(requests.get(), 10)
        assert request["mode"] == "url" and "schema" not in request
        refused = await client.call_tool(
            "_respond", {"request_id": request["request_id"], "payload": {"token": "forged"}}
        )
        assert refused.is_error  # only the page answers a URL question
        assert "answered on its own page" in text_of(refused.content[0])
        await pay(request["url"], SIGNED)
        result = await asyncio.wait_for(call, 10)
    assert result.structured_content == {"signed": True, "token": "signed-on-the-page"}


# -- modes: a client gets only the modes it declared -----------------------------------------


def test_declared_modes_follow_the_declared_sub_capabilities() -> None:
    def modes(elicitation: dict[str, Any] | None) -> set[str]:
        caps = types.ClientCapabilities.model_validate(
            {} if elicitation is None else {"elicitation": elicitation}
        )
        return set(declared_modes(caps))

    assert modes(None) == set()
    assert modes({}) == {"form"}  # the 2025-06-18 way: form only
    assert modes({"form": {}}) == {"form"}
    assert modes({"url": {}}) == {"url"}
    assert modes({"form": {}, "url": {}}) == {"form", "url"}


async def book(request: dict[str, Any]) -> dict[str, Any]:
    """Answer book_flight's form questions from their context, as a form-only client."""
    params = request["params"]
    assert params.get("mode", "form") == "form", params  # never a URL question
    schema = params["requestedSchema"]
    context = schema["x-model-context"]
    if "flight_id" in schema["properties"]:
        return {"action": "accept", "content": {"flight_id": FLIGHTS[0].id}}
    if "row" in schema["properties"]:
        return {"action": "accept", "content": free_seat(context["seat_map"]["flight_id"])}
    return {"action": "accept", "content": {"confirm": True}}


async def test_a_form_only_client_is_never_sent_the_payment_link(server: str) -> None:
    async with raw_session(f"{server}/mcp", "2025-11-25", {"elicitation": {}}) as session:
        call = {"name": "book_flight", "arguments": ROUTE}
        reply = await session.request("tools/call", call, answer=book)
    result = reply["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "Tool 'book_flight' needs an answer on a web page (URL mode), and this client declared "
        "form mode. Declare the elicitation.url capability (URL mode needs protocol 2025-11-25 "
        "or later) to use this tool; the call was stopped."
    )


async def test_a_url_only_client_is_never_sent_a_form(server: str) -> None:
    async with raw_session(f"{server}/mcp", "2025-11-25", {"elicitation": {"url": {}}}) as session:
        reply = await session.request("tools/call", {"name": "book_flight", "arguments": ROUTE})
    result = reply["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "Tool 'book_flight' needs an answer in a form (form mode), and this client declared "
        "url mode. Declare the elicitation.form capability to use this tool; the call was "
        "stopped."
    )


async def test_a_form_only_round_trip_client_is_stopped_at_the_url_question(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The SDK's client always declares both modes: make it declare what a form-only one would.
    declare = ClientSession._build_capabilities

    def form_only(self: ClientSession, version: str) -> types.ClientCapabilities:
        capabilities = declare(self, version)
        form = types.FormElicitationCapability()
        capabilities.elicitation = types.ElicitationCapability(form=form)
        return capabilities

    monkeypatch.setattr(ClientSession, "_build_capabilities", form_only)
    async with Client(
        signing_bridge().server, mode=MODERN, elicitation_callback=Consenting()
    ) as client:
        result = await client.session.call_tool("sign", {}, allow_input_required=True)
    assert isinstance(result, types.CallToolResult) and result.is_error
    assert text_of(result.content[0]).startswith(
        "Tool 'sign' needs an answer on a web page (URL mode), and this client declared form mode."
    )
