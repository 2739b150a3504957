"""Events published in this process reach its sockets directly: once each, in order (the other
workers' sockets: ``test_viewers``); a socket whose client stops reading is closed rather than
waited for."""

from __future__ import annotations

import json
import logging

import pytest

from chatbridge.chat.broadcast import publish, sockets_here
from chatbridge.chat.consumers import CLOSE_TOO_SLOW, MAX_OUTBOX
from chatbridge.engine.protocol import ErrorEvent
from tests.chat_client import ChatClient

pytestmark = pytest.mark.django_db(transaction=True)


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
