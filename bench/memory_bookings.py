"""Server memory over 1,000 completed bookings: does it come back?

One uvicorn worker (SQLite, in-memory channel layer, DEBUG off) serving
``bench.gc_asgi:application``. Warm-up bookings first (every code path loaded, caches filled),
then a garbage collection in the server (SIGUSR1) and its RSS: the baseline. Then 1,000 more
bookings through the chat's JSON protocol, as ``bench/load.py`` books (message, flight, seat,
review, payment page), in waves of chats that open, book once and close; then a collection and
the RSS again. Goal: within 20 MiB of the baseline. The RSS right after the bookings (before
the collection) is reported too.

    .venv/bin/python bench/memory_bookings.py [--bookings 1000] [--warmup 50] [--wave 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typing import Any

from bench.common import (  # noqa: E402
    BenchSite,
    append_results,
    free_port,
    goal,
    rss_kib,
    stop,
    table,
)
from bench.load import run  # noqa: E402

GOAL_MIB = 20.0


async def collected_rss(pid: int, done_file: Path, count: int) -> int:
    """Ask the server to collect garbage; its RSS (KiB) once it has."""
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while not (done_file.exists() and done_file.read_text() == str(count)):
        if time.monotonic() > deadline:
            raise TimeoutError("the server did not report its garbage collection")
        await asyncio.sleep(0.05)
    return rss_kib(pid)


async def bookings(base: str, total: int, wave: int) -> tuple[int, int]:
    """``total`` bookings in waves of ``wave`` chats; (completed, errors)."""
    completed = errors = 0
    while completed + errors < total:
        n = min(wave, total - completed - errors)
        result = await run(base, n, n, 1.0, 0.05, 60.0)
        stats = result["stats"]
        completed += stats.completed
        errors += len(stats.errors) + len(result["connect_errors"])
    return completed, errors


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bookings", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--wave", type=int, default=50)
    args = parser.parse_args()
    site = BenchSite()
    done = site.tmp / "gc-done"
    port = free_port()
    proc = site.start(
        "uvicorn", port, app="bench.gc_asgi:application", env={"BENCH_GC_DONE": str(done)}
    )
    base = f"http://127.0.0.1:{port}"
    try:
        started = rss_kib(proc.pid)
        warm_ok, warm_errors = await bookings(base, args.warmup, args.wave)
        baseline = await collected_rss(proc.pid, done, 1)
        t0 = time.perf_counter()
        ok, errors = await bookings(base, args.bookings, args.wave)
        wall = time.perf_counter() - t0
        after = rss_kib(proc.pid)
        collected = await collected_rss(proc.pid, done, 2)
    finally:
        stop(proc)
    grown = (collected - baseline) / 1024
    facts: list[list[Any]] = [
        ["RSS at start (MiB)", started / 1024],
        ["warm-up bookings completed / errors", f"{warm_ok} / {warm_errors}"],
        ["baseline: RSS after the warm-up and a collection (MiB)", baseline / 1024],
        ["bookings completed / errors", f"{ok} / {errors}"],
        ["bookings wall time (s)", wall],
        ["RSS right after the bookings (MiB)", after / 1024],
        ["RSS after a collection (MiB)", collected / 1024],
        ["growth over the baseline (MiB)", grown],
    ]
    body = [
        f"One uvicorn worker (SQLite, in-memory channel layer, DEBUG off); bookings in waves of "
        f"{args.wave} chats (each opens its page and socket, books once, closes); the collection "
        "is `gc.collect()` and `malloc_trim(0)` in the server on SIGUSR1 (bench/gc_asgi.py).",
        "",
        table(["fact", "value"], facts),
        "",
        table(
            ["goal", "measured", "status"],
            [
                [
                    f"RSS after {args.bookings} bookings and a collection within {GOAL_MIB:.0f} MiB "
                    "of the warmed-up baseline",
                    f"{grown:+.1f} MiB",
                    goal(grown <= GOAL_MIB and not errors),
                ]
            ],
        ),  # fmt: skip
    ]
    append_results(f"Memory over {args.bookings} bookings", "\n".join(body))


if __name__ == "__main__":
    asyncio.run(main())
