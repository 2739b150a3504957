"""Resume by replay, and the cross-worker hop over Redis.

1. ``SessionManager.create(..., journal=<10 entries>)`` → the pending question's ``elicit``
   event: p50/p99 (goal p50 ≤ 2 ms). The journal is recorded live first (5 answers, each
   followed by a ``ctx.step``), so it is exactly what a worker would load. Also the demo's
   ``book_flight`` resumed after its flight answer (→ the pick_seat question).
2. channels_redis ``RedisChannelLayer``: ``send`` → ``receive`` one hop, a ping-pong between
   two layer instances (two workers' connection pools), and ``group_send`` → ``receive``
   (what a conversation event takes to reach a socket on another worker). Unique prefix.

    .venv/bin/python bench/replay.py [--iterations 500]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pydantic import BaseModel, Field  # noqa: E402

from bench.common import append_results, goal, summary_ms, table  # noqa: E402
from chatbridge import (  # noqa: E402
    Accept,
    SessionManager,  # noqa: E402
    ToolContext,
    create_mcp_tool,
)
from chatbridge.author.sampling import SampleRequest, SampleResult  # noqa: E402

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


class Answer(BaseModel):
    value: str = Field(min_length=1, max_length=64)


def note(value: str) -> dict[str, str]:
    return {"noted": value}


async def run(params: Any, ctx: ToolContext) -> dict[str, Any]:
    notes = []
    for i in range(5):
        answer = await ctx.elicit("answer", message=f"Question {i + 1}?")
        notes.append(await ctx.step("note", note, answer.content.value))
    final = await ctx.elicit("answer", message="Last question?")
    return {"notes": notes, "final": final.action}


ten_calls = (
    create_mcp_tool("ten_calls")
    .description("Benchmark: 10 journaled calls, then a live question.")
    .elicits(answer=Answer)
    .execute(run)
)


async def no_sampler(request: SampleRequest) -> SampleResult:
    raise AssertionError("no sampling here")


async def record_journal(manager: SessionManager) -> list[dict[str, Any]]:
    session = await manager.create(ten_calls, {}, call_id="call_record")
    for i in range(6):
        event = await session.next_event()
        while event.type != "elicit":
            event = await session.next_event()
        if i == 5:
            break
        await session.respond_to_elicit(event.request.id, Accept({"value": f"v{i}"}))
    journal = session.journal
    await session.abort("recorded")
    assert len(journal) == 10, journal
    return journal


async def replay_times(
    manager: SessionManager,
    tool: Any,
    params: dict[str, Any],
    journal: list[dict[str, Any]],
    n: int,
) -> list[float]:
    samples = []
    for i in range(n):
        call_id = f"call_replay_{uuid.uuid4().hex[:12]}"
        t0 = time.perf_counter()
        session = await manager.create(tool, params, call_id=call_id, journal=journal)
        event = await session.next_event()
        while event.type != "elicit":
            event = await session.next_event()
        samples.append(time.perf_counter() - t0)
        await session.abort("measured")
    return samples


async def book_flight_journal(manager: SessionManager) -> list[dict[str, Any]]:
    from plugins.book_flight.tool import book_flight

    session = await manager.create(
        book_flight, {"origin": "JFK", "destination": "LAX"}, call_id="call_bf_record"
    )
    event = await session.next_event()
    while event.type != "elicit":
        event = await session.next_event()
    flight = event.request.context["flights"][0]["id"]
    await session.respond_to_elicit(event.request.id, Accept({"flight_id": flight}))
    event = await session.next_event()
    while event.type != "elicit":
        event = await session.next_event()
    journal = session.journal
    await session.abort("recorded")
    return journal


async def redis_hops(n: int) -> dict[str, list[float]]:
    from channels_redis.core import RedisChannelLayer

    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    config = {"address": REDIS_URL, "socket_timeout": None, "max_connections": 1000}
    a = RedisChannelLayer(hosts=[config], prefix=prefix)
    b = RedisChannelLayer(hosts=[config], prefix=prefix)
    ch_a, ch_b = await a.new_channel(), await b.new_channel()
    group = f"chat.bench-{uuid.uuid4().hex[:8]}"
    await b.group_add(group, ch_b)
    payload = {"type": "chat.event", "event": {"type": "elicit_response", "call_id": "call_x" * 4}}
    one_hop, ping_pong, group_hop = [], [], []

    async def echo() -> None:
        while True:
            message = await b.receive(ch_b)
            if message.get("stop"):
                return
            await b.send(ch_a, message)

    for i in range(n + 20):  # one hop: the receiver is already waiting
        waiting = asyncio.create_task(b.receive(ch_b))
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        await a.send(ch_b, payload)
        await waiting
        if i >= 20:
            one_hop.append(time.perf_counter() - t0)
    for i in range(n + 20):  # group_send → receive
        waiting = asyncio.create_task(b.receive(ch_b))
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        await a.group_send(group, payload)
        await waiting
        if i >= 20:
            group_hop.append(time.perf_counter() - t0)
    echoer = asyncio.create_task(echo())
    for i in range(n + 20):  # A → B → A
        t0 = time.perf_counter()
        await a.send(ch_b, payload)
        await a.receive(ch_a)
        if i >= 20:
            ping_pong.append(time.perf_counter() - t0)
    await a.send(ch_b, {"type": "x", "stop": True})
    await echoer
    await b.group_discard(group, ch_b)
    await a.flush()
    await a.close_pools()
    await b.close_pools()
    return {"one_hop": one_hop, "group_hop": group_hop, "ping_pong": ping_pong}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=500)
    args = parser.parse_args()
    n = args.iterations
    manager = SessionManager(sampler=no_sampler)
    journal = await record_journal(manager)
    await replay_times(manager, ten_calls, {}, journal, 50)  # warm-up
    ten = summary_ms(await replay_times(manager, ten_calls, {}, journal, n))

    from plugins.book_flight.tool import book_flight

    bf_journal = await book_flight_journal(manager)
    params = {"origin": "JFK", "destination": "LAX"}
    await replay_times(manager, book_flight, params, bf_journal, 20)
    bf = summary_ms(await replay_times(manager, book_flight, params, bf_journal, n))
    await manager.shutdown()

    rows: list[list[Any]] = [
        ["replay 10-entry journal → pending question", ten["n"], ten["p50"], ten["p99"], ten["mean"]],
        [f"replay book_flight ({len(bf_journal)} entry) → pick_seat question", bf["n"], bf["p50"], bf["p99"], bf["mean"]],
    ]  # fmt: skip
    redis_note = ""
    try:
        hops = await redis_hops(n)
    except Exception as exc:  # Redis not running: say so, keep the replay figures
        redis_note = f"Redis at {REDIS_URL} unavailable: {exc!r}"
        hops = {}
    names = {
        "one_hop": "Redis layer send → receive (one hop)",
        "group_hop": "Redis layer group_send → receive (one hop)",
        "ping_pong": "Redis layer ping-pong A → B → A (two layers)",
    }
    for key, samples in hops.items():
        s = summary_ms(samples)
        rows.append([names[key], s["n"], s["p50"], s["p99"], s["mean"]])
    body = [
        f"{n} iterations each after warm-up, one process. Redis {REDIS_URL}, channels_redis "
        "RedisChannelLayer with the project's pool settings and a unique prefix.",
        "",
        table(["measurement", "n", "p50 ms", "p99 ms", "mean ms"], [[r[0], int(r[1]), *r[2:]] for r in rows]),
        "",
        table(
            ["goal", "measured", "status"],
            [["replay of a 10-entry journal p50 ≤ 2 ms", f"{ten['p50']:.3f} ms", goal(ten["p50"] <= 2.0)]],
        ),
    ]  # fmt: skip
    if redis_note:
        body += ["", redis_note]
    append_results("Replay and cross-worker hop", "\n".join(body))


if __name__ == "__main__":
    asyncio.run(main())
