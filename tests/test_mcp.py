"""The same tools over real MCP, with the official client against daphne (DESIGN §6)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.extension import ClientExtension, advertise
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

import chatbridge
from chatbridge import (
    PluginRegistry,
    SessionManager,
    create_mcp_tool,
    make_plugin,
)
from chatbridge.author.model_context import extract_context, split_message
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.mcp.asgi import McpEndpoint
from chatbridge.mcp.server import McpBridge, McpSettings
from plugins.book_flight.data import search_flights, seat_map_for
from plugins.book_flight.plugin import book_flight_plugin
from tests.conftest import MCP_REQUEST_TIMEOUT
from tests.mcp_results import InputResponses, elicitation, input_required, responses, text_of
from tests.pages import pay, with_pages
from tests.servers import free_port, migrated_env, start_uvicorn, stop

ROUTE = {"origin": "JFK", "destination": "LAX"}
FLIGHTS = search_flights("JFK", "LAX")


def free_seat(flight_id: str) -> dict[str, Any]:
    label = seat_map_for(flight_id).first_free()
    assert label is not None
    return {"row": int(label[:-1]), "seat": label[-1]}


def booking_bridge(state_ttl: float = 900.0) -> McpBridge:
    """An in-process MCP server with book_flight, for the Client's in-memory transport."""
    return McpBridge(
        PluginRegistry([book_flight_plugin]),
        with_pages(SessionManager(sampler=LiteLLMSampler("offline/mcp"))),
        McpSettings(state_keys=[b"k" * 32], state_ttl=state_ttl),
    )


class Person:
    """An elicitation callback that reads the context and answers like a person."""

    def __init__(self, flight: int = 0, bad_seat_first: bool = False) -> None:
        self.flight, self.bad_seat_first = flight, bad_seat_first
        self.messages: list[str] = []
        self.contexts: list[dict[str, Any]] = []
        self.paid: list[str] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.messages.append(params.message)
        if params.mode == "url":  # the payment: pay on its page, then consent
            self.paid.append(params.url)
            await pay(params.url)  # the server may cancel this request once the page is done
            return types.ElicitResult(action="accept")
        found = extract_context(params.requested_schema, params.message)
        self.contexts.append(found)
        if "price_usd" in found:
            return types.ElicitResult(action="accept", content={"confirm": True})
        if "flights" in found:
            return types.ElicitResult(
                action="accept", content={"flight_id": found["flights"][self.flight]["id"]}
            )
        if self.bad_seat_first:
            self.bad_seat_first = False
            return types.ElicitResult(action="accept", content={"row": "front", "seat": "A"})
        return types.ElicitResult(
            action="accept", content=free_seat(found["seat_map"]["flight_id"])
        )


async def test_tools_are_listed_with_their_schemas_and_respond(server: str) -> None:
    async with Client(f"{server}/mcp", mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        info = client.server_info
    # The server names itself with the installed distribution's version.
    assert info is not None and info.version == chatbridge.__version__ != "0+unknown"
    # No MCP Apps negotiated: no app-only tools (test_clients_without_mcp_apps_get_...).
    assert set(tools) == {"book_flight", "pick_card", "send_feedback", "choose_color", "_respond"}
    assert tools["book_flight"].input_schema["required"] == ["origin", "destination"]
    assert tools["book_flight"].description.startswith("Book a flight for the user")
    assert tools["_respond"].input_schema["required"] == ["request_id", "payload"]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_respond_is_listed_only_to_clients_that_cannot_elicit(server: str, mode: str) -> None:
    async with Client(f"{server}/mcp", mode=mode, elicitation_callback=Person()) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        # Still callable (a client may have been sent request notifications): it answers as
        # for any request that is not open.
        with pytest.raises(MCPError, match="No open request 'req_nope'"):
            await client.call_tool("_respond", {"request_id": "req_nope", "payload": {}})
    assert listed == {"book_flight", "pick_card", "send_feedback", "choose_color"}
    async with Client(f"{server}/mcp", mode=mode) as client:  # declares no elicitation
        assert "_respond" in {t.name for t in (await client.list_tools()).tools}


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_book_flight_end_to_end(server: str, mode: str) -> None:
    person = Person(flight=1)
    logs: list[Any] = []
    progresses: list[tuple[float, float | None, str | None]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progresses.append((progress, total, message))

    async with Client(
        f"{server}/mcp",
        mode=mode,
        elicitation_callback=person,
        logging_callback=on_log,
        log_level="debug",
    ) as client:
        result = await client.call_tool("book_flight", ROUTE, progress_callback=on_progress)
    assert not result.is_error, result.content
    booked = result.structured_content
    assert booked["booked"] is True and booked["flight"] == FLIGHTS[1].number
    assert booked["seat"] == "{row}{seat}".format(**free_seat(FLIGHTS[1].id))
    assert booked["ticket"].startswith(f"CB-{FLIGHTS[1].id.replace('-', '')}-")
    assert "LAX" in booked["tip"]  # sampled on the server
    review = {"flight", "route", "departs", "seat", "price_usd"}
    assert [c.keys() for c in person.contexts] == [{"flights"}, {"seat_map"}, review]
    assert booked["paid"] == {"last4": "4242"}  # paid on the page: the client saw no card
    assert len(person.paid) == 1 and person.paid[0].startswith(f"{server}/elicit/")
    assert person.messages[0].startswith("Select your flight from JFK to LAX:")
    # Every era carries the context in the message too (DESIGN §4): 2026-07-28 results are
    # sieved to the version's schema, and legacy clients may strip unknown schema keys.
    for message, context in zip(person.messages, person.contexts, strict=False):
        assert split_message(message)[1] == context
    if mode == "legacy":
        assert (
            progresses[0] == (1.0, 4.0, "Found 5 flights") and progresses[-1][2] == "Ticket issued"
        )
        assert {"message": "Searching flights", "origin": "JFK", "destination": "LAX"} in logs


async def test_invalid_answers_are_asked_again_with_the_errors(server: str) -> None:
    person = Person(bad_seat_first=True)
    async with Client(f"{server}/mcp", mode="legacy", elicitation_callback=person) as client:
        result = await client.call_tool("book_flight", ROUTE)
    assert result.structured_content["booked"] is True
    assert len(person.messages) == 5  # flight, seat twice, review, payment
    again, context = split_message(person.messages[2])
    assert context is not None and context["seat_map"]["flight_id"] == FLIGHTS[0].id
    assert again == (
        f"Select your seat on {FLIGHTS[0].number}\n\nYour previous answer was not accepted. "
        "Row: Enter a number from 1 to 99. Please try again."
    )


async def answer_requests(
    client: Client, requests: asyncio.Queue[dict[str, Any]], flight: int
) -> None:
    """Answer book_flight's requests: flight, seat, review through _respond; pay on the page."""
    while True:
        request = await asyncio.wait_for(requests.get(), 10)
        context = request["context"]
        if request["mode"] == "url":
            await pay(request["url"])  # answered on its page: nothing to _respond
            return
        if request["request_type"] == "pick_flight":
            payload = {"flight_id": context["flights"][flight]["id"]}
        elif request["request_type"] == "pick_seat":
            payload = free_seat(context["seat_map"]["flight_id"])
        else:
            payload = {"confirm": True}
        answer = await client.call_tool(
            "_respond", {"request_id": request["request_id"], "payload": payload}
        )
        assert answer.structured_content["ok"] is True


async def test_a_client_that_cannot_elicit_answers_through_respond(server: str) -> None:
    requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            requests.put_nowait(params.data)

    async with Client(f"{server}/mcp", mode="legacy", logging_callback=on_log) as client:
        call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
        first = await asyncio.wait_for(requests.get(), 10)
        assert (
            first["request_type"] == "pick_flight"
            and first["timeout_ms"] == MCP_REQUEST_TIMEOUT * 1000
        )
        assert first["schema"]["properties"]["flight_id"]["type"] == "string"
        # The context in the request's own field, its schema and its message (DESIGN §4).
        assert (
            first["context"]["flights"] and first["schema"]["x-model-context"] == first["context"]
        )
        text, in_message = split_message(first["message"])
        assert text.startswith("Select your flight from JFK to LAX:")
        assert in_message == first["context"]
        requests.put_nowait(first)
        await answer_requests(client, requests, flight=2)
        result = await call
    assert result.structured_content["flight"] == FLIGHTS[2].number


async def test_concurrent_calls_stay_apart_by_request_id(server: str) -> None:
    queues: dict[int, asyncio.Queue[dict[str, Any]]] = {0: asyncio.Queue(), 3: asyncio.Queue()}

    async def run(flight: int) -> dict[str, Any]:
        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            if isinstance(params.data, dict) and params.data.get("type") == "request":
                queues[flight].put_nowait(params.data)

        async with Client(f"{server}/mcp", mode="legacy", logging_callback=on_log) as client:
            call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
            await answer_requests(client, queues[flight], flight)
            return (await call).structured_content

    first, second = await asyncio.gather(run(0), run(3))
    assert (first["flight"], second["flight"]) == (FLIGHTS[0].number, FLIGHTS[3].number)


async def test_a_client_that_never_answers_gets_a_result_after_the_timeout(server: str) -> None:
    async with Client(f"{server}/mcp", mode="legacy") as client:
        result = await asyncio.wait_for(
            client.call_tool("book_flight", ROUTE), MCP_REQUEST_TIMEOUT + 20
        )
    assert result.structured_content == {"booked": False, "reason": "flight selection cancelled"}


async def test_unknown_request_ids_are_invalid_params(server: str) -> None:
    async with Client(f"{server}/mcp", mode="legacy") as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("_respond", {"request_id": "req_nope", "payload": {}})
    assert info.value.error.code == types.INVALID_PARAMS
    assert "No open request 'req_nope'" in info.value.error.message


async def test_a_tampered_request_state_is_refused(server: str) -> None:
    # Declaring elicitation (a callback) makes the server use input_required; we drive by hand.
    async with Client(f"{server}/mcp", mode="2026-07-28", elicitation_callback=Person()) as client:
        first = await client.session.call_tool("book_flight", ROUTE, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        [(key, request)] = first.input_requests.items()
        assert key.startswith("book_flight:pick_flight:mcp_")
        state = first.request_state
        assert "journal" not in state  # sealed, not readable
        tampered = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
        answer: InputResponses = {
            key: types.ElicitResult(action="accept", content={"flight_id": FLIGHTS[0].id})
        }
        with pytest.raises(MCPError) as info:
            await client.session.call_tool(
                "book_flight",
                ROUTE,
                allow_input_required=True,
                input_responses=answer,
                request_state=tampered,
            )
        assert "requestState" in info.value.error.message
        with pytest.raises(MCPError):  # the state is bound to the arguments too
            await client.session.call_tool(
                "book_flight",
                {"origin": "JFK", "destination": "SFO"},
                allow_input_required=True,
                input_responses=answer,
                request_state=state,
            )
        second = await client.session.call_tool(
            "book_flight",
            ROUTE,
            allow_input_required=True,
            input_responses=answer,
            request_state=state,
        )
        assert isinstance(second, types.InputRequiredResult)
        assert next(iter(second.input_requests)).startswith("book_flight:pick_seat:")


def test_foreign_hosts_are_refused(server: str) -> None:
    request = urllib.request.Request(
        f"{server}/mcp",
        data=b"{}",
        method="POST",
        headers={"Host": "evil.example", "Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    info.value.close()
    assert info.value.code == 421


def test_a_model_that_is_not_flat_leaves_its_tool_out_of_mcp_naming_the_field(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Never a failed start (issue 29): the server is built without the tool, and says why
    (tests/test_transports.py: the chat still serves it, and the system check warns)."""

    class Address(BaseModel):
        street: str

    class Shipping(BaseModel):
        name: str
        address: Address

    async def ship(params: Any, ctx: Any) -> None:
        return None

    tool = create_mcp_tool("ship").elicits(where=Shipping).execute(ship)

    async def handler(req: Any, ctx: Any) -> Any:
        return None

    registry = PluginRegistry([make_plugin(tool).on_elicit(where=handler).build()])
    with caplog.at_level(logging.WARNING, logger="chatbridge.mcp"):
        bridge = McpBridge(registry, SessionManager(), McpSettings(state_keys=[b"k" * 32]))
    assert "ship" not in bridge.tools
    assert [r.getMessage() for r in caplog.records if r.name == "chatbridge.mcp"] == [
        "Tool 'ship' cannot be served over MCP: the answer to 'where' (Shipping) does not fit "
        "an MCP form. Elicitation schema field 'address' rendered as {'$ref': "
        "'#/$defs/Address'}, which is not a valid PrimitiveSchemaDefinition. MCP form "
        "elicitation takes strings, numbers, integers, booleans, choices (Literal or Enum) and "
        "lists of them. It is served in the chat only."
    ]


async def test_a_bearer_token_guards_the_endpoint() -> None:
    registry = PluginRegistry()
    bridge = McpBridge(registry, SessionManager(), McpSettings(state_keys=[b"k" * 32]))
    endpoint = McpEndpoint(bridge, allowed_hosts=["127.0.0.1"], token="s3cret")
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [(b"authorization", b"Bearer wrong")],
    }
    await endpoint(scope, receive, send)
    assert sent[0]["status"] == 401
    assert json.loads(sent[1]["body"])["error"] == "unauthorized"
    caller = await endpoint.identify({"headers": [(b"authorization", b"Bearer s3cret")]})
    assert caller.identity == "operator"


async def test_expired_request_state_is_refused() -> None:
    bridge = booking_bridge(state_ttl=0.5)
    async with Client(bridge.server, mode="2026-07-28", elicitation_callback=Person()) as client:
        first = input_required(
            await client.session.call_tool("book_flight", ROUTE, allow_input_required=True)
        )
        [key] = first.input_requests
        await asyncio.sleep(1.0)
        with pytest.raises(MCPError) as info:
            await client.session.call_tool(
                "book_flight",
                ROUTE,
                allow_input_required=True,
                input_responses=responses(
                    {key: types.ElicitResult(action="accept", content={"flight_id": FLIGHTS[0].id})}
                ),
                request_state=first.request_state,
            )
    assert info.value.error.message == "Invalid or expired requestState"


@pytest.fixture(scope="module")
def uvicorn_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """uvicorn with the lifespan on, over a migrated database (every MCP call is on record)."""
    env = migrated_env(tmp_path_factory.mktemp("uvicorn") / "db.sqlite3")
    port = free_port()
    proc = start_uvicorn(port, env)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


async def test_the_same_endpoint_works_under_uvicorn(uvicorn_url: str) -> None:
    async with Client(f"{uvicorn_url}/mcp", mode="legacy", elicitation_callback=Person()) as client:
        result = await client.call_tool("book_flight", ROUTE)
    assert result.structured_content["booked"] is True


async def test_invalid_answers_are_asked_again_over_input_required_too() -> None:
    bridge = booking_bridge()
    person = Person(bad_seat_first=True)
    async with Client(bridge.server, mode="2026-07-28", elicitation_callback=person) as client:
        result = await client.call_tool("book_flight", ROUTE)
    assert result.structured_content["booked"] is True
    assert len(person.messages) == 5
    assert "Your previous answer was not accepted. Row:" in person.messages[2]


APPS = "io.modelcontextprotocol/ui"
APP_MIME = "text/html;profile=mcp-app"


def apps_host() -> list[ClientExtension]:
    """What an MCP Apps host declares (ext-apps 2026-01-26, capability negotiation)."""
    return [advertise(APPS, {"mimeTypes": [APP_MIME]})]


async def test_the_server_declares_the_mcp_apps_extension(server: str) -> None:
    """``capabilities.extensions`` of ``server/discover`` (2026-07-28). The SDK's 2025-11-25
    ``initialize`` result has no ``extensions`` field, so only discovery carries it."""
    async with Client(f"{server}/mcp", mode="auto", extensions=apps_host()) as host:
        assert host.protocol_version == "2026-07-28"
        assert (host.server_capabilities.extensions or {}).get(APPS) == {}


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_clients_without_mcp_apps_get_the_text_only_tools(server: str, mode: str) -> None:
    """ext-apps, graceful degradation: only a client that negotiated the extension with the
    mcp-app MIME type sees ``_meta.ui`` and the app-only tools; any other gets the tools
    without them and cannot call the app-only ones (the question still comes as a form)."""
    async with Client(f"{server}/mcp", mode=mode, extensions=apps_host()) as host:
        shown = {t.name: t for t in (await host.list_tools()).tools}
    assert shown["choose_color"].meta == {
        "ui": {"resourceUri": "ui://color-picker", "visibility": ["model", "app"]}
    }
    assert {"_ui_question", "_ui_answer"} <= set(shown)
    for declared in ([], [advertise(APPS, {"mimeTypes": ["text/uri-list"]})]):
        async with Client(f"{server}/mcp", mode=mode, extensions=declared) as plain:
            tools = {t.name: t for t in (await plain.list_tools()).tools}
            with pytest.raises(MCPError) as refused:
                await plain.call_tool("_ui_question", {})
        assert "choose_color" in tools and "_ui_question" not in tools
        assert "_ui_answer" not in tools
        assert not (tools["choose_color"].meta or {}).get("ui")
        assert APPS in refused.value.error.message
        modern = mode != "legacy"
        assert refused.value.error.code == (-32021 if modern else types.INVALID_PARAMS)


async def test_guest_uis_are_mcp_app_resources_linked_from_their_tools(server: str) -> None:
    async with Client(f"{server}/mcp", mode="legacy", extensions=apps_host()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        resources = (await client.list_resources()).resources
        read = await client.read_resource("ui://color-picker")
    assert tools["choose_color"].meta == {
        "ui": {"resourceUri": "ui://color-picker", "visibility": ["model", "app"]}
    }
    for app_only in ("_ui_question", "_ui_answer"):  # hosts hide them from the model
        assert tools[app_only].meta == {
            "ui": {"resourceUri": "ui://color-picker", "visibility": ["app"]}
        }
    assert tools["book_flight"].meta is None or "ui" not in tools["book_flight"].meta
    ui_meta = {"ui": {"csp": {}, "prefersBorder": True}}
    assert [(str(r.uri), r.mime_type, r.meta) for r in resources] == [
        ("ui://color-picker", "text/html;profile=mcp-app", ui_meta)
    ]
    [page] = read.contents
    assert page.mime_type == "text/html;profile=mcp-app" and page.meta == ui_meta
    html = text_of(page)
    assert '"ui/initialize"' in html and "Custom colour (hex)" in html
    assert "<script src" not in html and "<link" not in html  # self-contained


async def test_a_guest_ui_question_reaches_mcp_clients_with_its_context(server: str) -> None:
    """Form-only clients see the default colour and theme; an app reads and answers the
    question through the app-only tools, and a refused answer is an error result."""
    notes: list[dict[str, Any]] = []
    asked = asyncio.Event()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            notes.append(params.data)
            asked.set()

    async with Client(
        f"{server}/mcp", mode="legacy", logging_callback=on_log, extensions=apps_host()
    ) as client:
        call = asyncio.create_task(
            client.call_tool("choose_color", {"default_color": "#A855F7", "theme": "dark"})
        )
        await asyncio.wait_for(asked.wait(), 15)
        context = {"default_color": "#A855F7", "theme": "dark"}
        assert notes[0]["context"] == context
        # The notification's schema carries the context too (DESIGN §4); the app's question
        # gives it as a field of its own, next to the plain schema.
        schema = dict(notes[0]["schema"])
        assert schema.pop("x-model-context") == context
        question = await client.call_tool("_ui_question", {})
        assert question.structured_content == {
            "message": "Please select a color for your theme",
            "key": "color",
            "schema": schema,
            "context": {"default_color": "#A855F7", "theme": "dark"},
            "error": None,
            "exits": {  # nothing earlier to change; Decline and Cancel in their default words
                "change": [],
                "decline": {
                    "label": "Decline",
                    "hint": "Say no to this question: the tool is told you declined, and decides.",
                },
                "cancel": {
                    "label": "Cancel",
                    "hint": "Close this question without answering: the tool is told, and decides.",
                },
            },
        }
        # A change the question does not offer is refused in words; the question stays open.
        unchanged = await client.call_tool("_ui_answer", {"action": "cancel", "change": "x"})
        assert unchanged.is_error
        assert text_of(unchanged.content[0]) == "This call has no earlier answer x to change."
        refused = await client.call_tool(
            "_ui_answer", {"action": "accept", "content": {"color": "#zzz"}}
        )
        assert refused.is_error
        said = text_of(refused.content[0])
        assert said.startswith("Your previous answer was not accepted. Color:")
        again = await client.call_tool("_ui_question", {})
        assert again.structured_content["error"] == said
        taken = await client.call_tool(
            "_ui_answer", {"action": "accept", "content": {"color": "#12AB34", "name": "Moss"}}
        )
        assert not taken.is_error
        result = await call
        none_left = await client.call_tool("_ui_answer", {"action": "cancel"})
    assert result.structured_content == {"chosen": True, "color": "#12ab34", "name": "Moss"}
    assert none_left.is_error
    assert text_of(none_left.content[0]) == "There is no open question for this app to answer."


def test_foreign_origins_are_refused(server: str) -> None:
    request = urllib.request.Request(
        f"{server}/mcp",
        data=b"{}",
        method="POST",
        headers={"Origin": "http://evil.example", "Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    info.value.close()
    assert info.value.code == 403


LONE = "@@lone-surrogate@@"  # what a client without a JSON encoder's checks would send


class LoneSurrogates(httpx2.AsyncHTTPTransport):
    """Real HTTP, but ``LONE`` in a request body goes out as an unpaired surrogate escape:
    the SDK's own client cannot encode one, careless clients do."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        if LONE.encode() in body:
            headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
            request = httpx2.Request(
                request.method,
                request.url,
                headers=headers,
                content=body.replace(LONE.encode(), b"\\ud800"),
                extensions=request.extensions,
            )
        return await super().handle_async_request(request)


@contextlib.asynccontextmanager
async def careless_client(server: str, mode: str, **options: Any) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(transport=LoneSurrogates(), timeout=30) as http:
        transport = streamable_http_client(f"{server}/mcp", http_client=http)
        async with Client(transport, mode=mode, **options) as client:
            yield client


async def test_a_lone_surrogate_in_a_respond_payload_is_refused_and_the_request_stays(
    server: str,
) -> None:
    requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            requests.put_nowait(params.data)

    async with careless_client(server, "legacy", logging_callback=on_log) as client:
        call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
        first = await asyncio.wait_for(requests.get(), 10)
        with pytest.raises(MCPError) as info:
            await client.call_tool(
                "_respond", {"request_id": first["request_id"], "payload": {"flight_id": LONE}}
            )
        assert info.value.error.code == types.PARSE_ERROR
        assert info.value.error.message.startswith("Parse error: ")
        requests.put_nowait(first)  # still open: answer it properly
        await answer_requests(client, requests, flight=1)
        result = await call
    assert result.structured_content["flight"] == FLIGHTS[1].number


async def test_a_lone_surrogate_in_input_responses_is_an_invalid_answer_asked_again(
    server: str,
) -> None:
    # 2026-07-28 requests are parsed by the SDK with json.loads, which keeps the surrogate;
    # the answer's model refuses it like any invalid answer, and the question is asked again.
    async with careless_client(server, "2026-07-28", elicitation_callback=Person()) as client:
        first = await client.session.call_tool("book_flight", ROUTE, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        [key] = first.input_requests

        def answer(flight_id: str) -> InputResponses:
            return {key: types.ElicitResult(action="accept", content={"flight_id": flight_id})}

        again = await client.session.call_tool(
            "book_flight",
            ROUTE,
            allow_input_required=True,
            input_responses=answer(LONE),
            request_state=first.request_state,
        )
        assert isinstance(again, types.InputRequiredResult)
        [(same, request)] = again.input_requests.items()
        assert same == key
        assert (
            "Your previous answer was not accepted. Flight id: Enter plain text: this has a "
            "character that cannot be read. Please try again." in elicitation(request).message
        )
        second = await client.session.call_tool(
            "book_flight",
            ROUTE,
            allow_input_required=True,
            input_responses=answer(FLIGHTS[0].id),
            request_state=again.request_state,
        )
    assert isinstance(second, types.InputRequiredResult)
    assert next(iter(second.input_requests)).startswith("book_flight:pick_seat:")
