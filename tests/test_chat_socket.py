"""The chat over a real Channels stack, JSON protocol: bookings, answers, aborts, refusals."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chatbridge.records.models import JournalRecord, ToolSession
from chatbridge.records.writer import flush
from chatbridge.runtime import ChatBridgeRuntime, current_runtime
from plugins.book_flight.data import search_flights, seat_map_for
from tests.chat_client import ChatClient, new_browser_session, new_conversation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]

BOOK = "Book a flight from JFK to LAX"


@pytest.fixture
async def chat() -> AsyncIterator[ChatClient]:
    client = await ChatClient.start()
    yield client
    await client.close()


def free_seat(form: dict[str, Any], skip: int = 0) -> tuple[int, str]:
    seat_map = form["context"]["seat_map"]
    free = [
        (row, seat)
        for row in range(1, seat_map["rows"] + 1)
        for seat in seat_map["seats"]
        if f"{row}{seat}" not in seat_map["taken"]
    ]
    return free[skip]


async def to_seat_picker(chat: ChatClient) -> tuple[dict[str, Any], dict[str, Any]]:
    await chat.send_user(BOOK)
    flights = await chat.next("elicit", key="pick_flight")
    await chat.answer(flights, flight_id=flights["context"]["flights"][0]["id"])
    seats = await chat.next("elicit", key="pick_seat")
    return flights, seats


async def test_full_booking_over_the_json_protocol(chat: ChatClient) -> None:
    state = chat.events[0] if chat.events else await chat.next("conversation_state")
    assert state["phase"] == "idle" and state["running"] is False

    await chat.send_user(BOOK)
    # The first message names the conversation: its echo says so (the page retitles itself).
    assert (await chat.next("user_message", content=BOOK))["title"] == BOOK
    call = await chat.next("tool_call", status="running")
    assert (call["tool_name"], call["arguments"]) == (
        "book_flight",
        {"origin": "JFK", "destination": "LAX"},
    )
    assert (await chat.next("log"))["message"] == "Searching flights"
    assert (await chat.next("progress"))["progress"] == 1
    flights = await chat.next("elicit", key="pick_flight")
    assert [f["id"] for f in flights["context"]["flights"]] == [
        f.id for f in search_flights("JFK", "LAX")
    ]
    assert flights["requested_schema"]["x-model-context"] == flights["context"]
    assert 'name="flight_id"' in flights["html"]
    await chat.answer(flights, flight_id=flights["context"]["flights"][0]["id"])
    await chat.next("elicit_response", action="accept")
    done = await chat.next("elicit_complete")
    assert done["content"] == {"flight_id": flights["context"]["flights"][0]["id"]}

    seats = await chat.next("elicit", key="pick_seat")
    row, letter = free_seat(seats)
    await chat.answer(seats, row=row, seat=letter)
    await chat.review_and_pay()
    result = (await chat.next("tool_call", status="completed"))["result"]
    assert result["booked"] is True and result["seat"] == f"{row}{letter}"
    assert result["paid"] == {"last4": "4242"}
    assert result["ticket"].startswith("CB-")
    summary = await chat.next("assistant_message")
    assert result["ticket"] in summary["content"]
    await chat.turn_done()
    await chat.send_user("Thanks!")
    assert (await chat.next("user_message", content="Thanks!"))["title"] is None  # named already
    await chat.turn_done()


async def test_an_invalid_row_is_rerendered_and_never_reaches_the_tool(chat: ChatClient) -> None:
    _, seats = await to_seat_picker(chat)
    await chat.answer(seats, row="not a number", seat="A")
    again = await chat.next("elicit", key="pick_seat")
    assert again["attempt"] == 2 and again["elicit_id"] == seats["elicit_id"]
    assert again["errors"] == {"row": ["Enter a number from 1 to 99"]}  # words for people
    assert "Enter a number from 1 to 99" in again["html"]
    assert "Input should be a valid integer" not in again["html"]
    row, letter = free_seat(seats)
    await chat.answer(again, row=row, seat=letter)
    review = await chat.next("elicit", key="review")
    completes = [e for e in chat.events if e["type"] == "elicit_complete"]
    assert completes[-1]["content"] == {"row": row, "seat": letter}  # only the valid answer went on
    await chat.review_and_pay(review)
    result = (await chat.next("tool_call", status="completed"))["result"]
    assert result["seat"] == f"{row}{letter}"


async def test_a_taken_seat_is_refused(chat: ChatClient) -> None:
    flights, seats = await to_seat_picker(chat)
    taken = seat_map_for(flights["context"]["flights"][0]["id"]).taken[0]
    await chat.answer(seats, seat_label=taken)
    again = await chat.next("elicit", key="pick_seat")
    assert again["errors"] == {"seat": [f"Seat {taken} is taken; choose another."]}
    await chat.answer(again, action="cancel")
    result = (await chat.next("tool_call", status="completed"))["result"]
    assert result == {"booked": False, "reason": "seat selection cancelled"}


async def test_declining_the_flight_list(chat: ChatClient) -> None:
    await chat.send_user(BOOK)
    flights = await chat.next("elicit", key="pick_flight")
    await chat.answer(flights, action="decline")
    assert (await chat.next("elicit_complete"))["action"] == "decline"
    result = (await chat.next("tool_call", status="completed"))["result"]
    assert result == {"booked": False, "reason": "flight selection declined"}
    reply = await chat.next("assistant_message")
    assert "did not go through (flight selection declined)" in reply["content"]


async def test_aborting_a_running_tool(chat: ChatClient) -> None:
    await chat.send_user(BOOK)
    flights = await chat.next("elicit", key="pick_flight")
    await chat.send(
        {"type": "abort", "session_id": flights["session_id"], "reason": "changed my mind"}
    )
    ended = await chat.next("tool_call", status="aborted")
    assert (ended["error"], ended["aborted_by"]) == ("changed my mind", "user")
    reply = await chat.next("assistant_message")
    # Told the truth: the user stopped it; no apology for an error, no retry.
    assert reply["content"] == (
        "OK, I stopped booking the flight as you asked. Tell me if you want to start again."
    )
    await chat.turn_done()


async def test_reconnecting_mid_flow_shows_the_form_again_and_answering_finishes(
    chat: ChatClient,
) -> None:
    await chat.send_user(BOOK)
    flights = await chat.next("elicit", key="pick_flight")
    await chat.close()

    again = ChatClient(chat.conversation_id, chat.session_key)
    await again.connect()
    state = await again.next("conversation_state")
    assert state["phase"] == "plugin_awaiting_elicit" and state["pending"] == [flights["call_id"]]
    form = await again.next("elicit", key="pick_flight")
    assert form["elicit_id"] == flights["elicit_id"]
    await again.answer(form, flight_id=form["context"]["flights"][1]["id"])
    seats = await again.next("elicit", key="pick_seat")
    row, letter = free_seat(seats)
    await again.answer(seats, row=row, seat=letter)
    await again.review_and_pay()
    assert (await again.next("tool_call", status="completed"))["result"]["booked"] is True
    await again.close()
    chat.socket = again.socket  # the fixture closes it again harmlessly


async def test_a_lost_session_is_reported_and_the_model_retries(chat: ChatClient) -> None:
    await chat.send_user(BOOK)
    flights = await chat.next("elicit", key="pick_flight")
    # A restart that lost the call's record too (a restored database, say): nothing to resume.
    # The page reconnects to the new process, its form still showing, and the person answers.
    await chat.close()
    await current_runtime().aclose()
    await sync_to_async(ToolSession.objects.filter(pk=flights["call_id"]).delete)()
    await ChatBridgeRuntime.from_settings().start()
    again = ChatClient(chat.conversation_id, chat.session_key)
    await again.connect()
    await again.next("conversation_state")
    chat.socket = again.socket  # the fixture closes it

    await again.answer(flights, flight_id=flights["context"]["flights"][0]["id"])
    lost = await again.next("session_error")
    assert (lost["error"], lost["call_id"]) == ("SESSION_NOT_FOUND", flights["call_id"])
    retry = await again.next("elicit", key="pick_flight")
    assert retry["call_id"] != flights["call_id"]
    messages = [e for e in again.events if e["type"] == "assistant_message"]
    assert messages[-1]["content"] == "The book flight session was lost; trying again."


async def test_another_browsers_conversation_is_refused() -> None:
    owner = await new_browser_session()
    conversation = await new_conversation(owner)
    stranger = ChatClient(conversation, await new_browser_session())
    connected, code = await stranger.socket.connect(timeout=10)
    assert (connected, code) == (False, 4403)
    no_origin = ChatClient(conversation, owner, origin=False)
    connected, _ = await no_origin.socket.connect(timeout=10)
    assert connected is False


async def test_commands_for_other_conversations_are_refused_and_the_socket_stays(
    chat: ChatClient,
) -> None:
    other = await ChatClient.start()
    await other.send_user(BOOK)
    theirs = await other.next("elicit", key="pick_flight")

    await chat.send({"type": "abort", "session_id": theirs["session_id"]})
    error = await chat.next("error")
    assert error["code"] == "NOT_FOUND"
    await chat.answer(theirs, flight_id="SH-142")
    assert (await chat.next("error"))["code"] == "NOT_FOUND"
    assert current_runtime().manager.get(theirs["session_id"]) is not None  # untouched

    await chat.send_user(BOOK)  # this socket still works
    assert (await chat.next("elicit", key="pick_flight"))["call_id"]
    await other.close()


async def test_an_oversized_message_gets_an_error_and_the_socket_is_closed(
    chat: ChatClient,
) -> None:
    await chat.socket.send_to(text_data="x" * (65 * 1024))
    assert (await chat.next("error"))["message"] == "Messages are limited to 64 KiB."
    closing = await chat.socket.receive_output(timeout=5)
    assert closing == {
        "type": "websocket.close",
        "code": 4009,
        "reason": "Messages are limited to 64 KiB.",  # where the server passes it on
    }


async def test_malformed_and_unknown_messages_get_errors(chat: ChatClient) -> None:
    await chat.socket.send_to(text_data="{not json")
    assert (await chat.next("error"))["code"] == "BAD_JSON"
    await chat.send({"type": "dance"})
    error = await chat.next("error")
    assert error["code"] == "BAD_COMMAND" and "dance" in error["message"]
    await chat.send({"type": "user_message", "text": "y" * 4001})
    error = await chat.next("error")  # refused in plain words, never cut short
    assert (error["code"], error["message"]) == (
        "TOO_LONG",
        "Your message is 4,001 characters long; the limit is 4,000. Shorten it and send it again.",
    )
    await chat.send({"type": "approve", "call_id": "nothing"})
    assert (await chat.next("error"))["message"] == "Nothing is waiting for approval as 'nothing'."
    await chat.send([1, 2])  # type: ignore[arg-type]
    assert (await chat.next("error"))["code"] == "BAD_COMMAND"
    await chat.send_user("hello")
    reply = await chat.next("assistant_message")
    assert reply["content"].startswith("I'm the offline assistant.")


async def test_a_second_message_while_a_tool_waits_is_refused(chat: ChatClient) -> None:
    await chat.send_user(BOOK)
    await chat.next("elicit", key="pick_flight")
    await chat.send_user("hello?")
    error = await chat.next("error")
    assert error == {
        "type": "error",
        "code": "BUSY",
        "message": "Please wait for the current reply, or abort the running tool.",
    }


async def test_a_question_nobody_answers_expires_and_the_model_is_told(chat: ChatClient) -> None:
    current_runtime().manager.idle_timeout = 0.3
    await chat.send_user(BOOK)
    await chat.next("elicit", key="pick_flight")
    expired = await chat.next("elicit_complete", timeout=10)
    assert (expired["action"], expired["note"]) == ("cancel", "expired: no answer in time")
    result = (await chat.next("tool_call", status="completed"))["result"]
    assert result == {"booked": False, "reason": "flight selection cancelled"}
    reply = await chat.next("assistant_message")
    assert "did not go through (flight selection cancelled)" in reply["content"]


def answer_frame(form: dict[str, Any], content: dict[str, Any], **raw: str) -> str:
    """An ``elicit_response`` frame for ``form``; the values named in ``raw`` are spliced in as
    raw JSON text (escapes and numbers no JSON encoder writes)."""
    placeholders = {key: f"@{key}@" for key in raw}
    text = json.dumps(
        {
            "type": "elicit_response",
            "session_id": form["session_id"],
            "call_id": form["call_id"],
            "elicit_id": form["elicit_id"],
            "action": "accept",
            "content": {**content, **placeholders},
        }
    )
    for key, token in raw.items():
        text = text.replace(json.dumps(placeholders[key]), token)
    return text


FEEDBACK = {
    "name": "Ada",
    "email": "ada@example.org",
    "visit_date": "2026-11-20",
    "rating": "4",
    "topic": "praise",
}
LONE_SURROGATE = (
    "That message was not valid JSON: a string has an unpaired surrogate escape "
    "(\\uD800-\\uDFFF). Send characters as UTF-8, or escape them as complete surrogate pairs."
)


async def test_a_lone_surrogate_in_an_answer_is_refused_and_the_question_stays(
    chat: ChatClient,
) -> None:
    await chat.send_user("Send feedback")
    request = await chat.next("approval_request")
    await chat.send({"type": "approve", "call_id": request["call_id"]})
    form = await chat.next("elicit", key="feedback")
    seen = len(chat.events)
    for token in ('"Hi \\uD800"', '"\\udc00 there"', '"\\ude00\\ud83d"'):  # high, low, reversed
        await chat.socket.send_to(text_data=answer_frame(form, FEEDBACK, comment=token))
        assert await chat.next("error", timeout=5) == {
            "type": "error",
            "code": "BAD_JSON",
            "message": LONE_SURROGATE,
        }
    assert [e["type"] for e in chat.events[seen:]] == ["error"] * 3  # nothing reached the form
    assert current_runtime().hub.state(chat.conversation_id).pending == [form["call_id"]]

    # A complete pair, escaped as json.dumps writes it ("\\ud83d\\ude00"), is text like any other.
    await chat.answer(form, **FEEDBACK, comment="Great \U0001f600")
    done = await chat.next("tool_call", status="completed")
    assert done["result"]["comment"] == "Great \U0001f600"


async def test_numbers_out_of_range_are_refused_like_nan(chat: ChatClient) -> None:
    _, seats = await to_seat_picker(chat)
    seen = len(chat.events)
    refusals = {
        "1e999": "That message was not valid JSON: the number 1e999 is out of range; "
        "numbers must be finite.",
        "-1E999": "That message was not valid JSON: the number -1E999 is out of range; "
        "numbers must be finite.",
        "NaN": "That message was not valid JSON: NaN is not a JSON number.",
        "-Infinity": "That message was not valid JSON: -Infinity is not a JSON number.",
    }
    for token, message in refusals.items():
        await chat.socket.send_to(text_data=answer_frame(seats, {"seat": "A"}, row=token))
        error = await chat.next("error", timeout=5)
        assert (error["code"], error["message"]) == ("BAD_JSON", message)
    assert [e["type"] for e in chat.events[seen:]] == ["error"] * len(refusals)
    await flush()  # refused answers would be recorded by the background writer
    record = await JournalRecord.objects.aget(session_id=seats["session_id"], key="pick_seat")
    assert record.rejected == [] and record.result is None  # nothing reached the form or audit

    row, letter = free_seat(seats)
    await chat.answer(seats, row=row, seat=letter)
    await chat.review_and_pay()
    assert (await chat.next("tool_call", status="completed"))["result"]["booked"] is True


async def test_an_answer_whose_session_is_not_its_call_is_refused_at_once(
    chat: ChatClient,
) -> None:
    await chat.send_user(BOOK)
    flights = await chat.next("elicit", key="pick_flight")
    await chat.send(
        {
            "type": "elicit_response",
            "session_id": flights["session_id"],  # live, and this conversation's
            "call_id": "call_someone_else",
            "elicit_id": flights["elicit_id"],
            "content": {"flight_id": flights["context"]["flights"][0]["id"]},
        }
    )
    await chat.send({"type": "approve", "call_id": "next"})
    # Failure bounds only: the socket used to sit in this answer for 10 s.
    refused = await chat.next("error", timeout=5)
    assert refused == {
        "type": "error",
        "code": "BAD_COMMAND",
        "message": f"This answer names session {flights['session_id']!r} and call "
        "'call_someone_else': a tool session's id is its call id, so send the call_id of "
        "the form as both.",
    }
    following = await chat.next("error", timeout=5)
    assert following["message"] == "Nothing is waiting for approval as 'next'."
    await chat.answer(flights, flight_id=flights["context"]["flights"][0]["id"])
    assert (await chat.next("elicit", key="pick_seat"))["call_id"] == flights["call_id"]
