"""Events published in this process reach its sockets directly: once each, in order (the other
workers' sockets: ``test_viewers``); a socket whose client stops reading is closed rather than
waited for."""

from __future__ import annotations

import json
import logging

import pytest

from chatbridge.chat.coalesce import coalesce
from chatbridge.chat.consumers import CLOSE_TOO_SLOW, MAX_OUTBOX
from chatbridge.cluster.broadcast import sockets_here
from chatbridge.engine.protocol import (
    AssistantDelta,
    ChatEvent,
    ConversationState,
    ErrorEvent,
    Phase,
)
from chatbridge.runtime import current_runtime
from tests.chat_client import ChatClient

pytestmark = pytest.mark.django_db(transaction=True)


async def publish(conversation_id: str, event: ChatEvent) -> None:
    """What the runtime's hub does with an event: its broadcast publishes it."""
    await current_runtime().broadcast.publish(conversation_id, event)


def note(n: int) -> ErrorEvent:
    return ErrorEvent(code="REFUSED", message=f"note {n}")


async def notes(chat: ChatClient, count: int) -> list[str]:
    """The next ``count`` notes' messages (other events skipped)."""
    seen: list[str] = []
    while len(seen) < count:
        event = json.loads(await chat.socket.receive_from(timeout=10))
        if event["type"] == "error" and event["message"].startswith("note "):
            seen.append(event["message"])
    return seen


@pytest.mark.usefixtures("fresh_runtime")
async def test_events_reach_the_sockets_of_this_process_in_order() -> None:
    chat = await ChatClient.start()
    other = ChatClient(chat.conversation_id, chat.session_key)
    await other.connect()
    assert sockets_here(chat.conversation_id) == 2
    for n in range(50):
        await publish(chat.conversation_id, note(n))
    expected = [f"note {n}" for n in range(50)]
    assert await notes(chat, 50) == expected
    assert await notes(other, 50) == expected
    await chat.close()
    await other.close()
    assert sockets_here(chat.conversation_id) == 0


@pytest.mark.usefixtures("fresh_runtime")
async def test_a_socket_too_far_behind_is_closed_and_says_why_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chat = await ChatClient.start()
    with caplog.at_level(logging.WARNING, logger="chatbridge.chat"):
        for n in range(MAX_OUTBOX + 5):  # no await yields here: none is sent meanwhile
            await publish(chat.conversation_id, note(n))
        while True:
            output = await chat.socket.receive_output(timeout=10)
            if output["type"] == "websocket.close":
                break
    assert output["code"] == CLOSE_TOO_SLOW
    assert f"fell {MAX_OUTBOX} events behind" in caplog.text


def state(phase: Phase) -> ConversationState:
    return ConversationState(conversation_id="c", phase=phase, running=phase != "done")


def delta(text: str, message_id: str = "m1") -> AssistantDelta:
    return AssistantDelta(message_id=message_id, delta=text)


def test_coalesce_keeps_the_last_state_where_it_was_queued_and_joins_adjacent_deltas() -> None:
    queued: list[ChatEvent] = [
        state("start_iteration"),
        delta("Hel"),
        state("streaming"),
        delta("lo"),
        delta(", "),
        delta("other", "m2"),
        delta("world", "m1"),
        note(1),
        state("done"),
        note(2),
    ]
    sent = coalesce(queued)
    assert [e.model_dump() for e in sent] == [
        delta("Hello, ").model_dump(),
        delta("other", "m2").model_dump(),
        delta("world").model_dump(),
        note(1).model_dump(),
        state("done").model_dump(),
        note(2).model_dump(),
    ]
    assert coalesce([state("start_iteration")]) == [state("start_iteration")]
    assert [e.type for e in coalesce([note(1), note(2)])] == ["error", "error"]


async def frames_until(chat: ChatClient, last: str) -> list[dict[str, object]]:
    """The socket's frames up to the note ``last`` (inclusive)."""
    frames: list[dict[str, object]] = []
    while not frames or frames[-1].get("message") != last:
        frames.append(json.loads(await chat.socket.receive_from(timeout=10)))
    return frames


@pytest.mark.usefixtures("fresh_runtime")
async def test_a_socket_behind_gets_the_burst_coalesced_one_that_keeps_up_gets_every_event() -> (
    None
):
    chat = await ChatClient.start()
    await publish(chat.conversation_id, note(0))
    await frames_until(chat, "note 0")  # what the socket is sent on connect, read
    burst: list[ChatEvent] = [
        state("start_iteration"),
        delta("Hel"),
        delta("lo"),
        state("streaming"),
        delta("!"),
        note(1),
    ]
    for event in burst:  # no await yields here: all queued before the first is sent
        await publish(chat.conversation_id, event)
    behind = await frames_until(chat, "note 1")
    assert [(f["type"], f.get("delta") or f.get("phase")) for f in behind] == [
        ("assistant_delta", "Hello"),
        ("conversation_state", "streaming"),
        ("assistant_delta", "!"),
        ("error", None),
    ]
    for event in [*burst[:-1], note(2)]:  # one at a time, each read before the next
        await publish(chat.conversation_id, event)
        frame = json.loads(await chat.socket.receive_from(timeout=10))
        assert frame == json.loads(event.model_dump_json())
    await chat.close()
