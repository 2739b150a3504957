"""Events published in this process reach its sockets directly: once each, in order, also when
the channel layer is Redis (which carries them to the other processes' sockets); a socket whose
client stops reading is closed rather than waited for."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from channels.layers import get_channel_layer

from chatbridge.chat.broadcast import conversation_group, publish, sockets_here
from chatbridge.chat.consumers import CLOSE_TOO_SLOW, MAX_OUTBOX
from chatbridge.chat.recorder import WORKER_ID
from chatbridge.core.protocol import ErrorEvent
from chatbridge.runtime import ChatBridgeRuntime
from tests.chat_client import ChatClient
from tests.test_worker_faults import OwnRedis, own_redis, redis_layer  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def note(n: int) -> ErrorEvent:
    return ErrorEvent(code="NOTE", message=f"note {n}")


async def notes(chat: ChatClient, count: int) -> list[str]:
    """The next ``count`` NOTE events' messages (other events skipped)."""
    seen: list[str] = []
    while len(seen) < count:
        event = json.loads(await chat.socket.receive_from(timeout=10))
        if event["type"] == "error" and event["code"] == "NOTE":
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


@pytest.fixture
async def redis_runtime(redis_layer: OwnRedis) -> AsyncIterator[ChatBridgeRuntime]:  # noqa: F811
    runtime = ChatBridgeRuntime.from_settings()
    await runtime.start()
    yield runtime
    await runtime.aclose()


async def test_with_redis_a_socket_gets_each_event_once_and_other_processes_get_it_too(
    redis_runtime: ChatBridgeRuntime,
) -> None:
    chat = await ChatClient.start()
    layer = get_channel_layer()
    assert layer is not None
    elsewhere = await layer.new_channel()  # a socket of another process, as the layer sees it
    await layer.group_add(conversation_group(chat.conversation_id), elsewhere)
    for n in range(5):
        await publish(chat.conversation_id, note(n))
    carried: list[dict[str, Any]] = [
        await asyncio.wait_for(layer.receive(elsewhere), 10) for _ in range(5)
    ]
    assert [m["event"]["message"] for m in carried] == [f"note {n}" for n in range(5)]
    assert {m["origin"] for m in carried} == {WORKER_ID}
    # The socket here got each event straight away, and drops the layer's copy of it: an event
    # of another process sent through the layer after them is the next one it gets.
    assert await notes(chat, 5) == [f"note {n}" for n in range(5)]
    foreign = {"type": "chat.event", "event": note(100).model_dump(mode="json")}
    await layer.group_send(conversation_group(chat.conversation_id), {**foreign, "origin": "x:1"})
    assert await notes(chat, 1) == ["note 100"]
    await chat.close()


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
