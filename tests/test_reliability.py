"""Reliability and security: fuzzed commands and answers, replays, limits, cleanup.

Each test reports its counts in the run's summary. ``CHATBRIDGE_FUZZ_EXAMPLES`` sets how many
examples the fuzzers send (``make fuzz`` sends 10,000 of each).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pytest_django.fixtures import Settings

from chatbridge.engine.protocol import COMMANDS
from chatbridge.records.models import JournalRecord
from chatbridge.records.writer import flush
from plugins.book_flight.data import seat_map_for
from plugins.book_flight.tool import PickSeat
from tests.chat_client import ChatClient
from tests.reliability import report

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]

EXAMPLES = int(os.environ.get("CHATBRIDGE_FUZZ_EXAMPLES", "150"))
BOOK = "Book a flight from JFK to LAX"


def generate(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """``count`` values drawn by hypothesis (used as a generator: no shrinking needed here)."""
    drawn: list[Any] = []

    @settings(
        max_examples=count,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: Any) -> None:
        drawn.append(value)

    collect()
    return drawn


leaves = (
    st.none()
    | st.booleans()
    | st.text(max_size=40)
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
)
surrogates = st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)  # mostly lone
json_like = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=25,
)
commands = st.fixed_dictionaries(
    {"type": st.sampled_from([c for c in COMMANDS if c != "user_message"] + ["dance", "", "<b>"])},
    optional={
        "session_id": json_like,
        "call_id": json_like,
        "elicit_id": json_like,
        "action": st.sampled_from(["accept", "decline", "cancel", "maybe"]) | json_like,
        "content": json_like,
        "reason": json_like,
        "text": json_like,
        "extra": json_like,
    },
)
raw_frames = st.one_of(
    commands.map(lambda c: json.dumps(c, allow_nan=True)),
    json_like.map(lambda v: json.dumps(v, allow_nan=True)),
    st.text(max_size=200),
    st.integers(min_value=1, max_value=3000).map(lambda depth: "[" * depth + "]" * depth),
    st.just("9" * 5000),
    st.sampled_from(["1e999", "-1e999", '{"type": "approve", "call_id": 1e400}']),
    surrogates.map(lambda text: json.dumps({"type": "approve", "call_id": text})),
)


async def drain(chat: ChatClient, tally: Counter[str]) -> None:
    """Read what the server answered; the socket must still be open."""
    while not await chat.socket.receive_nothing(timeout=0.02, interval=0.005):
        output = await chat.socket.receive_output(timeout=1)
        assert output["type"] == "websocket.send", f"socket closed: {output}"
        event = json.loads(output["text"])
        tally[event.get("code") or event["type"]] += 1


@pytest.fixture(autouse=True)
def no_rate_limit(settings: Settings) -> None:
    settings.CHATBRIDGE_WS_RATE = 1e9  # the fuzzers send as fast as they can
    settings.CHATBRIDGE_WS_BURST = 1e9
    # One question takes every fuzzed answer (set before the runtime is built; the limit of
    # refused answers has its own tests, tests/test_refused_answers.py).
    settings.CHATBRIDGE_MAX_REFUSED_ANSWERS = None


async def test_fuzzed_frames_never_crash_the_socket() -> None:
    chat = await ChatClient.start()
    frames = generate(raw_frames, EXAMPLES)
    tally: Counter[str] = Counter()
    for frame in frames:
        await chat.socket.send_to(text_data=frame or " ")  # the test client refuses empty frames
        await drain(chat, tally)
    await chat.send({"type": "approve", "call_id": "still-here"})
    assert (await chat.next("error"))["code"] == "NOT_FOUND"  # the socket still works
    report("fuzzed frames", sent=len(frames), **dict(tally))
    assert tally["INTERNAL_ERROR"] == 0
    await chat.close()


def _valid(content: Any, taken: set[str]) -> bool:
    try:
        seat = PickSeat.model_validate(content)
    except Exception:
        return False
    return seat.row <= 30 and f"{seat.row}{seat.seat}" not in taken


async def test_fuzzed_answers_never_reach_the_tool() -> None:
    chat = await ChatClient.start()
    await chat.send_user(BOOK)
    flights = await chat.next("elicit", key="pick_flight")
    flight_id = flights["context"]["flights"][0]["id"]
    await chat.answer(flights, flight_id=flight_id)
    form = await chat.next("elicit", key="pick_seat")
    taken = set(seat_map_for(flight_id).taken)
    answers = st.one_of(
        st.fixed_dictionaries({"row": json_like, "seat": json_like}),
        st.fixed_dictionaries({"seat_label": json_like}),
        st.dictionaries(st.text(max_size=10), json_like, max_size=3),
        st.fixed_dictionaries(
            {"row": st.integers(-5, 40), "seat": st.sampled_from(list("ABCDEFG"))}
        ),
        st.fixed_dictionaries({"seat_label": surrogates}),
    )
    invalid = [a for a in generate(answers, EXAMPLES) if not _valid(a, taken)]
    tally: Counter[str] = Counter()
    for content in invalid:
        await chat.socket.send_to(
            text_data=json.dumps(
                {
                    "type": "elicit_response",
                    "session_id": form["session_id"],
                    "call_id": form["call_id"],
                    "elicit_id": form["elicit_id"],
                    "action": "accept",
                    "content": content,
                },
                allow_nan=True,
            )
        )
        await drain(chat, tally)
    await flush()  # refused answers are recorded by the background writer
    record = await JournalRecord.objects.aget(session_id=form["session_id"], key="pick_seat")
    assert record.result is None  # nothing reached the tool
    json_ok = [c for c in invalid if not _refused_as_json(c)]
    assert len(record.rejected) == len(json_ok)  # each refused answer is on record
    label = seat_map_for(flight_id).first_free()
    await chat.answer(form, seat_label=label)
    await chat.review_and_pay()
    done = await chat.next("tool_call", status="completed")
    assert done["result"]["seat"] == label
    report("fuzzed answers", sent=len(invalid), rejected=len(record.rejected), **dict(tally))
    await chat.close()


def _refused_as_json(value: Any) -> bool:
    """Refused before it is an answer (BAD_JSON): NaN, infinities, lone surrogates."""
    if isinstance(value, float):
        return math.isnan(value) or math.isinf(value)
    if isinstance(value, str):  # a high and a low surrogate in a row travel as one character
        return any(0xD800 <= ord(c) <= 0xDFFF for c in json.loads(json.dumps(value)))
    if isinstance(value, dict):
        return any(_refused_as_json(k) or _refused_as_json(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_refused_as_json(v) for v in value)
    return False


async def test_duplicate_stale_replayed_and_foreign_answers_are_refused() -> None:
    chat = await ChatClient.start()
    await chat.send_user(BOOK)
    flights = await chat.next("elicit", key="pick_flight")
    answer = {
        "type": "elicit_response",
        "session_id": flights["session_id"],
        "call_id": flights["call_id"],
        "elicit_id": flights["elicit_id"],
        "action": "accept",
        "content": {"flight_id": flights["context"]["flights"][0]["id"]},
    }
    for _ in range(5):  # a double-click, five times over: the copies are taken quietly
        await chat.send(answer)
    seats = await chat.next("elicit", key="pick_seat")
    completes = [e for e in chat.events if e["type"] == "elicit_complete"]
    assert len(completes) == 1  # exactly one resume

    await chat.send(answer)  # replayed later, the question asked now is another one: quiet
    other = {**answer, "content": {"flight_id": flights["context"]["flights"][1]["id"]}}
    await chat.send(other)  # another answer to the answered question: refused in words
    refused = await chat.next("error")
    assert (refused["code"], refused["message"]) == (
        "ALREADY_ANSWERED",
        "That question was already answered, so this answer was not used.",
    )
    codes = Counter(e.get("code") for e in chat.events if e["type"] == "error")
    assert codes == {"ALREADY_ANSWERED": 1}
    stranger = await ChatClient.start()
    await stranger.send(
        {**answer, "elicit_id": seats["elicit_id"], "content": {"seat_label": "1A"}}
    )
    assert (await stranger.next("error"))["code"] == "NOT_FOUND"
    records = [r async for r in JournalRecord.objects.filter(session_id=flights["session_id"])]
    assert [(r.key, r.result is not None) for r in records] == [
        ("pick_flight", True),
        ("pick_seat", False),
    ]
    report("replayed answers", duplicates=4, stale=1, foreign=1, resumes=len(completes))
    await chat.close()
    await stranger.close()


async def test_the_rate_limit_holds_and_the_socket_survives(settings: Settings) -> None:
    settings.CHATBRIDGE_WS_RATE = 5
    settings.CHATBRIDGE_WS_BURST = 10
    chat = await ChatClient.start()
    for _ in range(60):
        await chat.send({"type": "approve", "call_id": "x"})
    tally: Counter[str] = Counter()
    await asyncio.sleep(0.2)
    await drain(chat, tally)
    assert tally["NOT_FOUND"] <= 12 and tally["RATE_LIMITED"] >= 1
    await asyncio.sleep(1.0)  # tokens come back
    await chat.send({"type": "approve", "call_id": "x"})
    assert (await chat.next("error"))["code"] == "NOT_FOUND"
    report(
        "rate limit", sent=61, served=tally["NOT_FOUND"] + 1, limited_notices=tally["RATE_LIMITED"]
    )
    await chat.close()


async def test_a_flooding_socket_is_closed(settings: Settings) -> None:
    settings.CHATBRIDGE_WS_RATE = 1
    settings.CHATBRIDGE_WS_BURST = 1
    chat = await ChatClient.start()
    closed = None
    for sent in range(1, 400):
        await chat.socket.send_to(text_data='{"type": "approve", "call_id": "x"}')
        if sent % 50 == 0:
            while not await chat.socket.receive_nothing(timeout=0.05):
                output = await chat.socket.receive_output(timeout=1)
                if output["type"] == "websocket.close":
                    closed = output
                    break
        if closed:
            break
    assert closed == {"type": "websocket.close", "code": 4429}
    report("flooding", sent=sent, closed_with=4429)


async def test_dropped_connections_are_cleaned_up(settings: Settings) -> None:
    import tracemalloc

    from chatbridge.chat.socket_caps import SOCKETS
    from chatbridge.cluster.broadcast import sockets_here

    settings.CHATBRIDGE_SOCKETS_PER_VISITOR = 100  # one browser's 100 sockets at once

    first = await ChatClient.start()
    key, conversation = first.session_key, first.conversation_id
    await first.close()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for round_ in range(3):
        sockets = [ChatClient(conversation, key) for _ in range(100)]
        await asyncio.gather(*(s.connect() for s in sockets))
        assert sockets_here(conversation) == 100
        # Abrupt (no goodbye); the consumers get time to run their disconnect even on a busy host.
        await asyncio.gather(*(s.socket.disconnect(timeout=30) for s in sockets))
        assert sockets_here(conversation) == 0, round_
        assert SOCKETS.open_sockets(visitor=f"session:{key}") == 0, round_  # places given back
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename")) / 1024
    assert grown < 2048, f"{grown:.0f} KiB kept after 300 connections"
    report("dropped connections", opened=300, left_attached=0, memory_growth_kib=round(grown))


async def test_html_errors_are_escaped() -> None:
    from tests.chat_client import html_socket

    socket = await html_socket()
    await socket.receive_from(timeout=5)  # the state fragment
    await socket.send_to(text_data=json.dumps({"type": "<script>alert(1)</script>"}))
    html = await socket.receive_from(timeout=5)
    assert "<script>alert" not in html  # not echoed raw (nor at all: people get words)
    assert "the page sent something the server did not expect" in html
    await socket.disconnect()
    report("escaping", checked=1)
