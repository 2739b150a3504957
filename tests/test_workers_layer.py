"""The workers' channel layer (``chatbridge.cluster.workers_layer``) on a Redis of the test's
own: one PUBLISH a message, a message that reaches nobody raised as ``NotDelivered``, a
channel dropped once done, and subscriptions back after Redis restarts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis

from chatbridge.cluster.reply_channels import NotDelivered, reply_channel
from chatbridge.cluster.workers_layer import WorkersLayer
from chatbridge.environment import redis_host
from tests.test_worker_faults import OwnRedis

pytestmark = [pytest.mark.services]


@pytest.fixture
async def layer() -> AsyncIterator[tuple[WorkersLayer, OwnRedis]]:
    own = OwnRedis()
    own.start()
    made = WorkersLayer(hosts=[redis_host(own.url)], prefix="test")
    try:
        yield made, own
    finally:
        await made.flush()
        own.kill()


def commands(meter: redis.Redis) -> dict[str, int]:
    """Redis's count of each command (this reading's own INFO left out)."""
    stats = meter.info("commandstats")
    return {k: int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info"}


async def test_a_message_costs_one_publish_and_a_group_reaches_its_channels(
    layer: tuple[WorkersLayer, OwnRedis],
) -> None:
    workers, own = layer
    channel = await workers.new_channel()
    await workers.group_add("chatbridge.worker.a", channel)
    await workers.send(channel, {"type": "warm", "n": 0})  # the connections made (HELLO)
    assert (await asyncio.wait_for(workers.receive(channel), 5))["n"] == 0
    meter = redis.Redis.from_url(own.url)  # one connection: its HELLO is counted before
    before = commands(meter)
    await workers.send(channel, {"type": "one", "n": 1})
    await workers.group_send("chatbridge.worker.a", {"type": "two", "n": 2})
    got = [await asyncio.wait_for(workers.receive(channel), 5) for _ in range(2)]
    after = commands(meter)
    assert [m["n"] for m in got] == [1, 2]  # in the order sent
    spent = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert spent == {"cmdstat_publish": 2}, spent


async def test_a_message_that_reaches_nobody_is_a_failure_not_silence(
    layer: tuple[WorkersLayer, OwnRedis],
) -> None:
    workers, _ = layer
    with pytest.raises(NotDelivered):
        await workers.send("test.specific.nobody", {"type": "lost"})
    with pytest.raises(NotDelivered):
        await workers.group_send("chatbridge.worker.gone", {"type": "lost"})
    async with reply_channel(workers) as channel:
        await workers.send(channel, {"type": "kept"})
        assert (await asyncio.wait_for(workers.receive(channel), 5))["type"] == "kept"
    with pytest.raises(NotDelivered):  # dropped once done: nothing more arrives there
        await workers.send(channel, {"type": "late"})


async def test_subscriptions_come_back_after_redis_restarts(
    layer: tuple[WorkersLayer, OwnRedis],
) -> None:
    """Redis restarted forgets every subscription; the layer's connection subscribes again
    as it reconnects and says so (``reconnected``), after which a message arrives."""
    workers, own = layer
    channel = await workers.new_channel()
    await workers.send(channel, {"type": "before"})
    assert (await asyncio.wait_for(workers.receive(channel), 5))["type"] == "before"
    back = asyncio.ensure_future(workers.reconnected())  # asked before Redis goes
    own.kill()
    own.start()
    async with asyncio.timeout(20):
        await back  # subscribed again on the new connection: a message now arrives
        await workers.send(channel, {"type": "after"})
        assert (await workers.receive(channel))["type"] == "after"


def used_since(before: dict[str, int], now: dict[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in now.items() if n != before.get(k, 0)}


async def test_a_relayed_request_costs_three_publishes_and_no_subscription(
    layer: tuple[WorkersLayer, OwnRedis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A legacy MCP request for a session another worker holds, over Redis: the request, the
    holder's "accepted" and its answer; each worker's relay inbox is subscribed once, not a
    channel a request (session_relay). The answer's start, its event and its end go in one
    message when they come within ``LINGER`` (5 ms); a holder the machine deschedules longer
    sends them apart (a CI run once counted 4), so the window is widened here: the count then
    does not depend on the scheduler, and a complete answer still travels at once."""
    from channels.layers import channel_layers

    from chatbridge.mcp import relay_wire
    from tests.test_session_relay import INITIALIZED, TOOLS, opened, relay_workers, request

    made, own = layer
    monkeypatch.setattr(relay_wire, "LINGER", 10.0)
    before_layer = channel_layers.set("default", made)
    meter = redis.Redis.from_url(own.url)
    try:
        async with relay_workers() as (holder, other):
            session = await opened(holder)
            await request(other, "POST", TOOLS, session=session)  # connections made, inbox too
            before = commands(meter)
            # A notification needs no answer: handed over one way, answered where it came.
            assert (await request(other, "POST", INITIALIZED, session=session)).status == 202
            assert used_since(before, commands(meter)) == {"cmdstat_publish": 1}
            before = commands(meter)
            listed = await request(other, "POST", TOOLS, session=session)
            assert listed.status == 200 and [m["id"] for m in listed.json()] == [2]
            assert used_since(before, commands(meter)) == {"cmdstat_publish": 3}
            # For a holder no worker listens for (gone), at once what the SDK answers.
            gone = f"{'cd' * 16}.host-3"
            refused = await request(other, "POST", INITIALIZED, session=gone)
            assert refused.status == 404 and b"Session not found" in refused.body
    finally:
        if before_layer is None:
            channel_layers.backends.pop("default", None)
        else:
            channel_layers.set("default", before_layer)
        meter.close()
