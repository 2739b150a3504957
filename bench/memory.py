"""Memory per suspended session: 10,000 tool calls each waiting on one question, one process.

Uses ``chatbridge.core.SessionManager`` directly (no web, no socket, no database observer):
RSS (VmRSS) before and after creating the sessions (each is driven to its ``elicit`` event, as
the chat's driver does), after ``gc.collect()``. A second pass under ``tracemalloc`` says where
the bytes are (by file). Goal: ≤ 8 KiB per session beyond its socket.

    .venv/bin/python bench/memory.py [--sessions 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydantic import BaseModel, Field  # noqa: E402

from bench.common import append_results, goal, rss_kib, table  # noqa: E402
from chatbridge import ToolContext, create_mcp_tool  # noqa: E402
from chatbridge.core import SessionManager  # noqa: E402
from chatbridge.core.sampling import SampleRequest, SampleResult  # noqa: E402

GOAL_KIB = 8.0


class Params(BaseModel):
    origin: str = Field(min_length=2, max_length=64)
    destination: str = Field(min_length=2, max_length=64)


class PickFlight(BaseModel):
    flight_id: str = Field(min_length=1, max_length=32)


async def run(params: Params, ctx: ToolContext) -> dict[str, Any]:
    choice = await ctx.elicit(
        "pick_flight", message=f"Select your flight from {params.origin} to {params.destination}"
    )
    return {"flight": choice.content.flight_id if choice.accepted else None}


wait_once = (
    create_mcp_tool("wait_once")
    .description("Benchmark: ask once and wait.")
    .parameters(Params)
    .elicits(pick_flight=PickFlight)
    .execute(run)
)


async def no_sampler(request: SampleRequest) -> SampleResult:  # never called
    raise AssertionError("no sampling in this benchmark")


async def create_many(manager: SessionManager, prefix: str, count: int) -> list[Any]:
    sessions = []
    for i in range(count):
        session = await manager.create(
            wait_once,
            {"origin": "JFK", "destination": "LAX"},
            call_id=f"call_{prefix}_{i:06d}",
            meta={"conversation_id": f"conv-{prefix}-{i}"},
        )
        sessions.append(session)
    for session in sessions:  # let each tool run to its question; consume it like a driver
        event = await session.next_event()
        assert event.type == "elicit", event
    return sessions


async def measure(count: int, trace: bool) -> dict[str, float]:
    manager = SessionManager(sampler=no_sampler)
    warm = await create_many(manager, "warm", 200)  # imports, caches, schema building
    await manager.shutdown()
    del warm
    gc.collect()
    if trace:
        tracemalloc.start(8)
    before_rss = rss_kib()
    snap0 = tracemalloc.take_snapshot() if trace else None
    t0 = time.perf_counter()
    sessions = await create_many(manager, "live", count)
    elapsed = time.perf_counter() - t0
    gc.collect()
    after_rss = rss_kib()
    result = {
        "sessions": len(manager),
        "rss_before": before_rss,
        "rss_after": after_rss,
        "create_s": elapsed,
    }
    if trace and snap0 is not None:
        snap1 = tracemalloc.take_snapshot()
        stats = snap1.compare_to(snap0, "filename")
        result["traced_bytes"] = sum(s.size_diff for s in stats)
        result["top"] = [  # type: ignore[assignment]
            (
                s.traceback[0].filename.split("site-packages/")[-1].split("/work/main/")[-1],
                s.size_diff,
            )
            for s in stats[:8]
        ]
        tracemalloc.stop()
    assert all(s.status == "awaiting_elicit" for s in sessions)
    await manager.shutdown()
    return result


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=10_000)
    args = parser.parse_args()
    n = args.sessions
    plain = await measure(n, trace=False)
    gc.collect()
    traced_n = min(n, 2000)  # tracemalloc is slow; the per-session figure does not depend on n
    traced = await measure(traced_n, trace=True)
    per_rss = (plain["rss_after"] - plain["rss_before"]) / n
    per_traced = traced["traced_bytes"] / traced_n / 1024
    rows = [
        ["suspended sessions", int(plain["sessions"])],
        ["RSS before (KiB)", int(plain["rss_before"])],
        ["RSS after (KiB)", int(plain["rss_after"])],
        ["RSS growth per session (KiB)", per_rss],
        [f"tracemalloc growth per session (KiB, {traced_n} sessions)", per_traced],
        ["time to create + suspend all (s)", plain["create_s"]],
        ["per session create → question (µs)", plain["create_s"] / n * 1e6],
    ]
    top = [[name, f"{size / traced_n:.0f}"] for name, size in traced["top"]]  # type: ignore[union-attr]
    body = "\n".join(
        [
            f"{n} sessions of a one-question tool, each suspended on `ctx.elicit`, in one process "
            "(SessionManager without observer: no socket, no database).",
            "",
            table(["measurement", "value"], rows),
            "",
            "Where the traced bytes are (tracemalloc, by file, bytes per session):",
            "",
            table(["file", "B/session"], top),
            "",
            table(
                ["goal", "measured", "status"],
                [
                    [
                        f"≤ {GOAL_KIB:.0f} KiB per session",
                        f"{per_rss:.2f} KiB",
                        goal(per_rss <= GOAL_KIB),
                    ]
                ],
            ),
        ]
    )
    append_results("Memory per suspended session", body)


if __name__ == "__main__":
    asyncio.run(main())
