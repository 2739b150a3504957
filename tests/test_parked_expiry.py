"""2026-07-28 calls and tasks parked by a worker that is gone end on record once their state's
time to live has passed (issue 27: nothing stays "live" on a dead worker); what is held by a
live worker, committed, recent, or not of those transports is left alone."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from chatbridge.mcp import rounds, task_serving
from chatbridge.mcp.parked import ParkedCalls
from chatbridge.records.models import ToolSession, WorkerHeartbeat
from chatbridge.runtime import ChatBridgeRuntime

pytestmark = pytest.mark.django_db(transaction=True)

TTL = 900.0
GONE, ALIVE = "gone-host:1", "other-host:2"


@sync_to_async
def parked(call_id: str, *, age: float = TTL + 60, worker: str = GONE, **fields: Any) -> None:
    """A call on record as a worker left it, last touched ``age`` seconds ago."""
    values = {
        "tool_name": "book_flight",
        "transport": rounds.TRANSPORT,
        "status": "awaiting_elicit",
        "pending_key": "pick_seat",
        "pending_elicit_id": f"{call_id}:2",
        "worker": worker,
        **fields,
    }
    ToolSession.objects.create(id=call_id, **values)
    since = timezone.now() - timedelta(seconds=age)
    ToolSession.objects.filter(pk=call_id).update(updated_at=since)  # past auto_now


@sync_to_async
def row(call_id: str) -> dict[str, Any]:
    return dict(ToolSession.objects.filter(pk=call_id).values()[0])


@sync_to_async
def alive(worker: str) -> None:
    WorkerHeartbeat.objects.create(worker=worker, beat_at=timezone.now())


async def test_parked_calls_past_their_time_end_on_record_and_nothing_else() -> None:
    await parked("round")
    await parked("task", transport=task_serving.TRANSPORT, status="running", pending_key="")
    await alive(ALIVE)
    await parked("held-by-a-live-worker", worker=ALIVE)
    await parked("committed", committed="payment")
    await parked("recent", age=TTL - 60)
    await parked("a-chat-call", transport="chat")
    await parked("ended", status="completed")

    ended = await ParkedCalls(TTL).sweep()

    assert sorted(ended) == ["round", "task"]
    for call_id, reason in (("round", rounds.EXPIRED), ("task", task_serving.EXPIRED)):
        record = await row(call_id)
        assert (record["status"], record["aborted_by"], record["pending_key"]) == (
            "aborted",
            "server",
            "",
        )
        assert record["outcome"] == {
            "kind": "aborted",
            "by": "server",
            "who": "",
            "reason": reason,
        }
        assert record["ended_at"] is not None
    for call_id in ("held-by-a-live-worker", "committed", "recent", "a-chat-call"):
        assert (await row(call_id))["status"] == "awaiting_elicit", call_id
    assert (await row("ended"))["status"] == "completed"


async def test_two_workers_sweeping_at_once_end_each_call_once() -> None:
    for n in range(5):
        await parked(f"round-{n}")
    first, second = await asyncio.gather(ParkedCalls(TTL).sweep(), ParkedCalls(TTL).sweep())
    assert sorted(first + second) == [f"round-{n}" for n in range(5)]  # each once, by one


async def test_a_runtime_sweeps_when_it_starts() -> None:
    await parked("left-by-a-restart")
    runtime = ChatBridgeRuntime.from_settings()
    await runtime.start()
    try:
        await asyncio.wait_for(runtime.parked.passed.wait(), 10)
    finally:
        await runtime.aclose()
    assert (await row("left-by-a-restart"))["status"] == "aborted"
