"""What the MCP specification asks of a server, checked on the wire (issue 14 point 4).

Raw JSON-RPC sessions (``tests.raw_mcp``) are a client of exactly the version and
capabilities a test needs; the SDK's ``Client`` covers the 2026-07-28 round trips.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from chatbridge import PluginRegistry, SessionManager, auto_form, create_mcp_tool, make_plugin
from chatbridge.author.model_context import extract_context, split_message
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.author.tools import McpTool
from chatbridge.mcp.server import McpBridge, McpSettings
from tests.raw_mcp import RawSession, raw_session
from tests.test_mcp import FLIGHTS, ROUTE, Person, booking_bridge

LEGACY = "2025-11-25"
MODERN = "2026-07-28"


async def cancel(request: dict[str, Any]) -> dict[str, Any]:
    return {"action": "cancel"}


def log_levels(session: RawSession) -> list[str]:
    return [p["level"] for p in session.notifications("notifications/message")]


async def test_logging_is_declared_and_set_level_filters_per_session(server: str) -> None:
    async with (
        raw_session(f"{server}/mcp", LEGACY, {"elicitation": {}}) as quiet,
        raw_session(f"{server}/mcp", LEGACY, {"elicitation": {}}) as chatty,
    ):
        [initialized] = [m for m in quiet.received if "result" in m]
        assert initialized["result"]["capabilities"]["logging"] == {}
        assert (await quiet.request("logging/setLevel", {"level": "warning"}))["result"] == {}
        assert (await chatty.request("logging/setLevel", {"level": "debug"}))["result"] == {}
        for session in (quiet, chatty):
            call = {"name": "book_flight", "arguments": ROUTE}
            reply = await session.request("tools/call", call, answer=cancel)
            assert reply["result"]["structuredContent"]["booked"] is False
    assert log_levels(quiet) == []
    assert "info" in log_levels(chatty)


async def test_a_bad_log_level_is_invalid_params(server: str) -> None:
    async with raw_session(f"{server}/mcp", LEGACY) as session:
        reply = await session.request("logging/setLevel", {"level": "loud"})
    assert reply["error"]["code"] == types.INVALID_PARAMS


async def test_a_client_whose_level_hides_requests_is_told_how_to_answer(server: str) -> None:
    async with raw_session(f"{server}/mcp", LEGACY) as session:
        await session.request("logging/setLevel", {"level": "error"})
        reply = await session.request("tools/call", {"name": "book_flight", "arguments": ROUTE})
    result = reply["result"]
    assert result["isError"] is True
    assert "logging level" in result["content"][0]["text"]


async def feedback_schema(server: str, version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ask send_feedback over ``version``: (the feedback form's schema, the final result)."""
    schemas: list[dict[str, Any]] = []

    async def answer(request: dict[str, Any]) -> dict[str, Any]:
        schema = request["params"]["requestedSchema"]
        schemas.append(schema)
        if "approve" in schema["properties"]:
            return {"action": "accept", "content": {"approve": True}}
        areas: Any = (
            "chat, mcp"
            if schema["properties"]["areas"]["type"] == "string"
            else [
                "chat",
                "mcp",
            ]
        )
        content = {
            "name": "Ada",
            "email": "ada@example.com",
            "visit_date": "2026-11-01",
            "rating": 5,
            "topic": "idea",
            "areas": areas,
        }
        return {"action": "accept", "content": content}

    async with raw_session(f"{server}/mcp", version, {"elicitation": {}}) as session:
        reply = await session.request(
            "tools/call", {"name": "send_feedback", "arguments": {}}, answer=answer
        )
    return schemas[-1], reply["result"]


async def test_a_2025_06_18_client_gets_no_multi_select_and_its_answer_is_read_back(
    server: str,
) -> None:
    schema, result = await feedback_schema(server, "2025-06-18")
    areas = schema["properties"]["areas"]
    assert areas["type"] == "string" and "items" not in areas
    assert "chat, tools, admin, mcp" in areas["description"]
    assert result.get("isError") is not True, result
    assert result["structuredContent"]["areas"] == ["chat", "mcp"]


async def test_a_2025_11_25_client_gets_multi_select_pattern_title_and_default(
    server: str,
) -> None:
    schema, result = await feedback_schema(server, LEGACY)
    properties = schema["properties"]
    assert properties["areas"]["type"] == "array"
    assert properties["areas"]["items"]["enum"] == ["chat", "tools", "admin", "mcp"]
    assert properties["code"]["pattern"] == r"^[A-Z]{3}-\d{3}$"
    assert properties["email"]["pattern"] == r"^[^@\s]+@[^@\s]+\.[^@\s]+$"
    assert properties["contact"]["default"] == "email"
    assert properties["name"]["title"] == "Your name"
    assert result["structuredContent"]["areas"] == ["chat", "mcp"]


@pytest.mark.parametrize(("mode", "code"), [("legacy", -32002), (MODERN, types.INVALID_PARAMS)])
async def test_unknown_resources_are_not_found_with_their_uri(
    server: str, mode: str, code: int
) -> None:
    """-32002 up to 2025-11-25 (server/resources); SEP-2164 made it -32602 on 2026-07-28."""
    async with Client(f"{server}/mcp", mode=mode) as client:
        with pytest.raises(MCPError) as info:
            await client.read_resource("ui://nope")
    assert info.value.error.code == code
    assert info.value.error.data == {"uri": "ui://nope"}


async def test_unrecognised_input_responses_keys_are_ignored(server: str) -> None:
    async with Client(f"{server}/mcp", mode=MODERN, elicitation_callback=Person()) as client:
        first = await client.session.call_tool("book_flight", ROUTE, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        [key] = first.input_requests
        answer = types.ElicitResult(action="accept", content={"flight_id": FLIGHTS[0].id})
        stray = types.ElicitResult(action="accept", content={"anything": 1})
        second = await client.session.call_tool(
            "book_flight",
            ROUTE,
            allow_input_required=True,
            input_responses={key: answer, "not-a-question-of-ours": stray},
            request_state=first.request_state,
        )
    assert isinstance(second, types.InputRequiredResult)
    assert next(iter(second.input_requests)).startswith("book_flight:pick_seat:")


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_progress_never_goes_backwards(mode: str) -> None:
    bridge = booking_bridge()
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with Client(bridge.server, mode=mode, elicitation_callback=Person()) as client:
        result = await client.call_tool("book_flight", ROUTE, progress_callback=on_progress)
    assert result.structured_content["booked"] is True
    assert seen == sorted(seen) and seen[-1] == 4.0


async def wobbly(params: Any, ctx: Any) -> Any:
    await ctx.notify("two", progress=2)
    await ctx.notify("back to one", progress=1)
    await ctx.notify("two again", progress=2)
    await ctx.elicit("seat", message="Which seat?")
    await ctx.notify("one, in the next round", progress=1)
    await ctx.notify("three", progress=3)
    return {"done": True}


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_progress_only_ever_increases_within_a_call(mode: str) -> None:
    """basic/utilities/progress: the value MUST increase with each notification."""
    bridge = bridge_of(create_mcp_tool("wobbly").elicits(seat=Seat).execute(wobbly))
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async def answer(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"seat": "12C"})

    async with Client(bridge.server, mode=mode, elicitation_callback=answer) as client:
        result = await client.call_tool("wobbly", {}, progress_callback=on_progress)
    assert result.structured_content == {"done": True}
    assert seen == [(2.0, "two"), (3.0, "three")]


async def test_a_pushed_question_carries_its_context_in_the_schema_the_message_and_meta(
    server: str,
) -> None:
    """DESIGN §4 on the legacy push: the schema's x-model-context, the message's boundary
    section after the readable text (a client that strips unknown schema keys still finds
    it), and _meta in addition; all three the same context."""
    asked: list[dict[str, Any]] = []

    async def answer(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request["params"])
        return {"action": "cancel"}

    async with raw_session(f"{server}/mcp", LEGACY, {"elicitation": {}}) as session:
        await session.request("tools/call", {"name": "book_flight", "arguments": ROUTE}, answer)
    [question] = asked
    context = question["requestedSchema"]["x-model-context"]
    assert [f["id"] for f in context["flights"]] == [f.id for f in FLIGHTS]
    text, from_message = split_message(question["message"])
    assert text.startswith("Select your flight from JFK to LAX:") and "{" not in text
    assert from_message == context
    assert question["_meta"]["x-model-context"] == context
    stripped = {k: v for k, v in question["requestedSchema"].items() if k != "x-model-context"}
    assert extract_context(stripped, question["message"]) == context


class Seat(BaseModel):
    seat: str


def bridge_of(*tools: McpTool[Any, Any]) -> McpBridge:
    plugins = [
        make_plugin(t).on_elicit(**dict.fromkeys(t.elicits, auto_form)).build() for t in tools
    ]
    return McpBridge(
        PluginRegistry(plugins),
        SessionManager(sampler=LiteLLMSampler("offline/mcp")),
        McpSettings(state_keys=[b"k" * 32]),
    )


async def crash(params: Any, ctx: Any) -> Any:
    answer = await ctx.elicit("seat", message="Which seat?")
    return {"seats": {}}[answer.content.seat]  # a bug: KeyError


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_a_failing_tool_names_no_exception_or_internal_id(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    bridge = bridge_of(create_mcp_tool("crash").elicits(seat=Seat).execute(crash))

    async def answer(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"seat": "12C"})

    async with Client(bridge.server, mode=mode, elicitation_callback=answer) as client:
        result = await client.call_tool("crash", {})
    assert result.is_error
    [text] = [c.text for c in result.content if isinstance(c, types.TextContent)]
    assert text == "The tool failed unexpectedly. The server logged the details for its operators."
    assert "KeyError: '12C'" in caplog.text  # the details are in the server's log


async def test_bad_arguments_are_explained_to_the_caller() -> None:
    bridge = bridge_of(create_mcp_tool("crash").elicits(seat=Seat).execute(crash))
    async with Client(bridge.server, mode="legacy") as client:
        result = await client.call_tool("crash", {"unexpected": 1})
    text = json.dumps(result.model_dump(mode="json"))
    assert "mcp_" not in text and "InvalidToolParams" not in text, text
