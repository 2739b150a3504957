"""One attempts policy for every transport (issue 40): a question whose answers are refused as
often as ``CHATBRIDGE_MAX_REFUSED_ANSWERS`` allows (5 by default) closes by itself, and the call
ends failed with ``TooManyRefusedAnswers``. The chat's card, the record, the model, MCP clients
(pushed, ``_respond``, 2026-07-28 rounds) and Tasks are told that the answer was refused five
times and why; none of them is told the user denied or cancelled, and the tool never sees a
``Cancel``. Under the limit every transport asks again with the errors."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.test import Client as Browser
from mcp import Client
from pydantic import BaseModel

from chatbridge import (
    AnswerRefused,
    SessionManager,
    answer_rule,
    create_mcp_tool,
)
from chatbridge.author.model_context import split_message
from chatbridge.mcp.flat import flat_schemas
from chatbridge.mcp.round_state import input_required
from chatbridge.mcp.task_serving import TRANSPORT, TaskServing
from chatbridge.records.models import Message, ToolSession
from chatbridge.runtime import ChatBridgeRuntime
from chatbridge.testing import run_tool
from tests.chat_client import ChatClient
from tests.mcp_results import text_of
from tests.test_mcp_conformance import MODERN, bridge_of


class Room(BaseModel):
    room: str

    @answer_rule("room")
    def _free(cls, room: str, context: dict[str, Any]) -> None:
        if room not in context["free"]:
            raise AnswerRefused(f"Room {room} is taken.")


seen: list[str] = []  # what the tool's question gave it: an action, or the exception it raised


async def stay(params: Any, ctx: Any) -> dict[str, Any]:
    try:
        answer = await ctx.elicit("room", message="Which room?", free=["101", "102"])
    except Exception as exc:
        seen.append(type(exc).__name__)
        raise
    seen.append(answer.action)
    return {"room": answer.content.room if answer.accepted else None}


stay_tool = create_mcp_tool("stay").elicits(room=Room).execute(stay)

REFUSED = (
    "The answer to 'room' was refused 5 times, as often as a question allows, so the question "
    "was closed and the call failed. Last refusal: Room: Room 7 is taken. Call the tool again "
    "to start over."
)
ASKED_AGAIN = (
    "Which room?\n\nYour previous answer was not accepted. Room: Room 7 is taken. Please try again."
)
TAKEN = {"action": "accept", "content": {"room": "7"}}


@pytest.fixture(autouse=True)
def fresh_seen() -> None:
    seen.clear()


def heads(messages: list[str]) -> list[str]:
    """What each question said, without the context section after its boundary."""
    return [split_message(m)[0] for m in messages]


# The runtime's own test harness --------------------------------------------------------------


async def test_run_tool_sees_the_call_fail_after_five_refused_answers() -> None:
    run = await run_tool(stay_tool, answers={"room": [{"room": "7"}] * 5})
    assert (run.status, run.error) == ("failed", f"TooManyRefusedAnswers: {REFUSED}")
    assert run.refused == [("room", {"room": ["Room 7 is taken."]})] * 5
    assert seen == ["TooManyRefusedAnswers"]


async def test_under_the_limit_run_tool_goes_on_with_the_next_answer() -> None:
    run = await run_tool(stay_tool, answers={"room": [{"room": "7"}] * 4 + [{"room": "101"}]})
    assert (run.status, run.result) == ("completed", {"room": "101"})
    assert seen == ["accept"]


# MCP: legacy push and 2026-07-28 rounds, with the official Python SDK's client --------------


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_an_mcp_client_refused_five_times_gets_the_failure_in_words(mode: str) -> None:
    asked: list[str] = []

    async def stubborn(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"room": "7"})

    async with Client(
        bridge_of(stay_tool).server, mode=mode, elicitation_callback=stubborn
    ) as client:
        result = await client.call_tool("stay", {})
    assert result.is_error and [text_of(c) for c in result.content] == [REFUSED]
    assert heads(asked) == ["Which room?", *[ASKED_AGAIN] * 4]  # asked exactly five times
    assert seen == ["TooManyRefusedAnswers"]  # never a Cancel


async def test_a_client_answering_through_respond_is_told_on_its_last_refused_answer() -> None:
    notices: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            notices.put_nowait(params.data)

    async with Client(
        bridge_of(stay_tool).server, mode="legacy", logging_callback=on_log
    ) as client:
        call = asyncio.create_task(client.call_tool("stay", {}))
        notice = await asyncio.wait_for(notices.get(), 10)
        said = []
        for _ in range(5):  # the same request stays open while its answers are refused
            answer = {"request_id": notice["request_id"], "payload": {"room": "7"}}
            replied = await client.call_tool("_respond", answer)
            assert replied.is_error
            said.append(text_of(replied.content[0]))
        result = await call
    refusal = "Your previous answer was not accepted. Room: Room 7 is taken. Please try again."
    assert said == [refusal] * 4 + [REFUSED]
    assert result.is_error and [text_of(c) for c in result.content] == [REFUSED]
    assert notices.empty() and seen == ["TooManyRefusedAnswers"]


async def test_a_respond_payload_that_is_no_object_counts_as_a_refused_answer() -> None:
    notices: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            notices.put_nowait(params.data)

    async with Client(
        bridge_of(stay_tool).server, mode="legacy", logging_callback=on_log
    ) as client:
        call = asyncio.create_task(client.call_tool("stay", {}))
        notice = await asyncio.wait_for(notices.get(), 10)
        said = []
        for _ in range(5):
            answer = {"request_id": notice["request_id"], "payload": 7}
            said.append(text_of((await client.call_tool("_respond", answer)).content[0]))
        result = await call
    not_an_object = "Your previous answer was not accepted: payload: must be an object."
    last = REFUSED.replace("Room: Room 7 is taken", "Payload: must be an object")
    assert said == [not_an_object] * 4 + [last]
    assert [text_of(c) for c in result.content] == [last]


# MCP Tasks, served in process -----------------------------------------------------------------


@pytest.fixture
async def tasks(manager: SessionManager) -> TaskServing:
    shape = functools.partial(input_required, {stay_tool.name: flat_schemas(stay_tool)})
    return TaskServing(
        manager,
        {stay_tool.name: stay_tool},
        shape,
        900.0,
        cluster=None,
        settle=30.0,
        poll_interval=0.1,
    )


async def test_a_task_refused_five_times_completes_with_the_failure_in_words(
    manager: SessionManager, tasks: TaskServing
) -> None:
    session = await manager.create(stay_tool, {}, call_id="task-1", meta={"transport": TRANSPORT})
    task = await tasks.started(session)
    keys, messages = [], []
    while task["status"] == "input_required":
        task = await tasks.serve("get", "task-1", {})
        if task["status"] != "input_required":
            break
        [(key, request)] = task["inputRequests"].items()
        keys.append(key)
        messages.append(request["params"]["message"])
        task = await tasks.serve("update", "task-1", {key: TAKEN})
    assert keys == ["stay:room:task-1:1", *(f"stay:room:task-1:1#{n}" for n in range(2, 6))]
    assert heads(messages) == ["Which room?", *[ASKED_AGAIN] * 4]
    assert task["status"] == "completed"
    assert task["result"] == {
        "content": [{"type": "text", "text": REFUSED}],
        "isError": True,
        "resultType": "complete",
    }
    assert seen == ["TooManyRefusedAnswers"]


# The chat's socket ----------------------------------------------------------------------------

NOT_OFFERED = "Choose one of the flights listed."
FLIGHT_REFUSED = (
    "The answer to 'pick_flight' was refused 5 times, as often as a question allows, so the "
    "question was closed and the call failed. Last refusal: Flight id: Choose one of the "
    "flights listed. Call the tool again to start over."
)


@pytest.fixture
async def chat(fresh_runtime: ChatBridgeRuntime) -> AsyncIterator[ChatClient]:
    client = await ChatClient.start()
    yield client
    await client.close()


@pytest.mark.django_db(transaction=True)
async def test_the_chat_closes_a_question_refused_five_times_and_says_why(
    chat: ChatClient, fresh_runtime: ChatBridgeRuntime
) -> None:
    await chat.send_user("Book a flight from JFK to LAX")
    form = await chat.next("elicit", key="pick_flight")
    for attempt in range(2, 6):  # asked again with the errors, four times
        await chat.answer(form, flight_id="XX-999")
        form = await chat.next("elicit", key="pick_flight")
        assert (form["attempt"], form["errors"]) == (attempt, {"flight_id": [NOT_OFFERED]})
    await chat.answer(form, flight_id="XX-999")
    ended = await chat.next("tool_call", status="failed")
    assert ended["outcome"] == {
        "kind": "failed",
        "error_type": "TooManyRefusedAnswers",
        "message": FLIGHT_REFUSED,
        "refused": {
            "key": "pick_flight",
            "count": 5,
            "why": "Flight id: Choose one of the flights listed",
        },
    }
    assert ended["error"] == f"TooManyRefusedAnswers: {FLIGHT_REFUSED}"
    reply = await chat.next("assistant_message")
    assert reply["content"] == (
        "I stopped booking the flight: your answer was refused 5 times (last refusal: Flight "
        "id: Choose one of the flights listed). Tell me if you want to try again."
    )
    await chat.turn_done()
    assert [e["type"] for e in chat.events].count("elicit") == 5  # not shown a sixth time

    await fresh_runtime.writer.flush()
    row = await ToolSession.objects.aget(pk=ended["call_id"])
    assert (row.status, row.error) == ("failed", f"TooManyRefusedAnswers: {FLIGHT_REFUSED}")
    told = await Message.objects.aget(tool_call_id=ended["call_id"], role="tool")
    assert told.content == (
        "Answer refused: the user's answer to 'pick_flight' was refused 5 times, as often as a "
        "question allows, so the tool call ended without finishing. Last refusal: Flight id: "
        "Choose one of the flights listed. Tell the user why in plain words; do not call the "
        "tool again unless they ask."
    )
    page = await sync_to_async(_page)(chat)
    card = re.search(
        rf'<article class="tool-card" id="tool-{ended["call_id"]}".*?</article>', page, re.S
    )
    assert card is not None
    assert ">Failed</span>" in card.group(0)
    assert (
        "Not done: your answer was refused 5 times, so the question was closed. Last refusal: "
        "Flight id: Choose one of the flights listed." in card.group(0)
    )
    assert "Something went wrong on our side" not in card.group(0)


def _page(chat: ChatClient) -> str:
    """The conversation's page as its browser loads it (the cards from the record)."""
    browser = Browser()
    browser.cookies["sessionid"] = chat.session_key
    return browser.get(f"/c/{chat.conversation_id}/").content.decode()
