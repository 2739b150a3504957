"""Reaching workers through the channel layer: each listens to its own group and the shared
one; a message for a worker that is gone gets no reply (the caller then takes over or keeps the
answer on record); a worker never routes to itself; one bad message does not stop a listener.

These run the listener of this process (the in-memory layer); tests/test_scale_out.py and
tests/test_worker_faults.py run the same paths between worker processes on Redis."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from pydantic import BaseModel

from chatbridge import ToolContext, create_mcp_tool
from chatbridge.cluster.messages import CommandDone, Ping, Pong, RoutedCommand
from chatbridge.cluster.peers import (
    ChannelPeers,
    _ask_worker,
    broadcast_abort,
    deliver_page_answer,
    query_workers,
    route_task,
    worker_group,
)
from chatbridge.engine.protocol import Abort, ElicitResponseCommand, parse_command
from chatbridge.records.recorder import WORKER_ID
from chatbridge.runtime import ChatBridgeRuntime

pytestmark = [pytest.mark.django_db(transaction=True)]

GONE = "gone-host:1"


class Answer(BaseModel):
    text: str


async def waits(params: Any, ctx: ToolContext) -> str:
    answer = await ctx.elicit("answer", message="Anything?")
    return "answered" if answer.accepted else answer.action


waiting_tool = create_mcp_tool("waits").elicits(answer=Answer).execute(waits)


def test_a_worker_s_group_name_is_a_valid_channel_group_name() -> None:
    assert worker_group("web-1.example:4242") == "chatbridge.worker.web-1.example-4242"
    assert worker_group("a b/c:1") == "chatbridge.worker.a-b-c-1"
    assert len(worker_group("x" * 300)) == len("chatbridge.worker.") + 80


async def test_this_worker_answers_in_its_own_group(fresh_runtime: ChatBridgeRuntime) -> None:
    reply = await _ask_worker(WORKER_ID, Ping(), 2.0, "ping")
    assert reply == Pong(worker=WORKER_ID)


async def test_a_worker_that_is_gone_gets_no_reply_and_nothing_is_routed_to_oneself(
    fresh_runtime: ChatBridgeRuntime,
) -> None:
    assert await _ask_worker(GONE, Ping(), 0.2, "ping") is None
    peers = ChannelPeers()
    abort = parse_command({"type": "abort", "session_id": "s1"})
    answer = parse_command(
        {"type": "elicit_response", "session_id": "c1", "call_id": "c1", "elicit_id": "e1"}
    )
    assert isinstance(abort, Abort) and isinstance(answer, ElicitResponseCommand)
    for worker in (WORKER_ID, ""):
        assert not await peers.alive(worker)
        assert await peers.route(worker, "conversation", answer) is None
        assert await peers.forward(worker, "conversation", abort) is None
        assert await route_task(worker, {"task_id": "t"}) is None
    assert not await peers.alive(GONE)  # no heartbeat on record


async def test_a_worker_nobody_can_hear_is_not_waited_for(
    fresh_runtime: ChatBridgeRuntime,
) -> None:
    """On the in-memory layer a worker of another process is never heard (two servers on one
    database and no Redis): asked for a minute, the answer "not reached" comes at once, not at
    the minute's end; a member of the group in this process is still reached."""
    from asgiref.sync import sync_to_async
    from channels.layers import get_channel_layer
    from django.utils import timezone

    from chatbridge.cluster.reply_channels import never_heard
    from chatbridge.records.models import WorkerHeartbeat

    elsewhere = "other-host:4242"  # alive by its heartbeat, in a process of its own
    await sync_to_async(WorkerHeartbeat.objects.create)(worker=elsewhere, beat_at=timezone.now())
    layer = get_channel_layer()
    assert never_heard(layer, worker_group(elsewhere))
    assert not never_heard(layer, worker_group(WORKER_ID))  # this process's listener is in it
    asking = asyncio.ensure_future(_ask_worker(elsewhere, Ping(), 60.0, "ping"))
    done, _ = await asyncio.wait({asking}, timeout=5)  # a bound for the test, not a measure
    assert done and asking.result() is None


async def test_operators_see_and_abort_a_live_call_on_whichever_worker_holds_it(
    fresh_runtime: ChatBridgeRuntime,
) -> None:
    session = await fresh_runtime.manager.create(waiting_tool, {}, call_id="held-here")
    event = await asyncio.wait_for(session.next_event(), 5)
    assert event.type == "elicit"
    [here] = [r for r in await query_workers() if r["worker"] == WORKER_ID]
    [listed] = [s for s in here["sessions"] if s["id"] == "held-here"]
    assert (listed["tool_name"], listed["pending_key"]) == ("waits", "answer")

    reply = await broadcast_abort("held-here", "stopped in a test", by="operator")
    assert reply is not None and (reply.worker, reply.decision) == (WORKER_ID, "aborted")
    end = await asyncio.wait_for(session.next_event(), 5)
    assert (end.type, getattr(end, "reason", "")) == ("aborted", "stopped in a test")
    assert await broadcast_abort("held-nowhere", "x", by="operator", timeout=0.3) is None


async def test_a_page_answer_for_a_call_no_worker_holds_is_left_on_record(
    fresh_runtime: ChatBridgeRuntime,
) -> None:
    delivered = await deliver_page_answer(
        "no-such-call", "waits:answer:no-such-call:1", {"action": "cancel"}, timeout=0.3
    )
    assert delivered is False


async def test_a_command_that_is_not_routed_between_workers_is_refused_in_words(
    fresh_runtime: ChatBridgeRuntime,
) -> None:
    command = parse_command({"type": "user_message", "text": "hello"})
    message = RoutedCommand(conversation_id="c", command=command)
    reply = await _ask_worker(WORKER_ID, message, 2.0, "forwarding")
    assert reply == CommandDone(
        worker=WORKER_ID,
        ok=False,
        code="BAD_COMMAND",
        message="A 'user_message' command is not routed between workers.",
    )


async def test_a_malformed_message_is_logged_and_the_listener_keeps_serving(
    fresh_runtime: ChatBridgeRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    assert layer is not None
    with caplog.at_level(logging.ERROR, logger="chatbridge.workers"):
        await layer.group_send(worker_group(WORKER_ID), {"type": "workers.answer"})
        reply = await _ask_worker(WORKER_ID, Ping(), 2.0, "ping")
    assert reply == Pong(worker=WORKER_ID)
    assert "malformed worker message 'workers.answer' dropped" in caplog.text
