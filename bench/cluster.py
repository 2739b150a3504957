"""What a booking costs a cluster (issue 27, point 5; issue 40: every transport): Redis
commands, PostgreSQL transactions and server CPU per booking, for one uvicorn worker and for
two behind HAProxy's round robin (docs/deploy.md's configuration), on PostgreSQL and a Redis of
its own, measured in one run: the chat, legacy MCP, 2026-07-28 rounds and MCP Tasks.

Counts, not times: Redis's ``INFO commandstats`` (every command, the benchmark's own INFO
calls taken out), PostgreSQL's ``pg_stat_database`` for the cluster's database (commits and
rollbacks), and the workers' CPU from ``/proc``. Each phase books ``--bookings`` flights one
after the other through the chat's JSON socket (flight, seat, review, the payment page over
HTTP); an idle phase as long counts what the workers do on their own (heartbeats, the
listener joining its groups again), which is reported apart and taken out of the bookings'
counts. Each reading waits
11 s first: a PostgreSQL 15 backend that went idle soon after sending its counters sends the
next ones only when it has been idle for 10 s (``PGSTAT_IDLE_INTERVAL``); with a shorter wait
a booking's transactions were counted in the next phase or not at all (the same code read 72
and 26 transactions a booking in two runs).

    .venv/bin/python bench/cluster.py [--bookings 10]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbridge.settings")

import django  # noqa: E402

django.setup()  # the test helpers import the app's modules

import aiohttp  # noqa: E402
import httpx  # noqa: E402
import mcp_types as types  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402
from mcp import Client  # noqa: E402

from bench.common import append_results, goal, table  # noqa: E402
from plugins.book_flight.data import search_flights, seat_map_for  # noqa: E402
from tests.balancer import start_haproxy  # noqa: E402
from tests.chat_http import RemoteChat  # noqa: E402
from tests.servers import free_port, start_each, start_uvicorn, stop  # noqa: E402
from tests.test_mcp import ROUTE, Person, free_seat  # noqa: E402
from tests.test_mcp_sessions import (  # noqa: E402
    MODERN,
    at_seat_question,
    paid_after_review,
    retry,
    seat_answer,
)
from tests.test_mcp_tasks import McpClient, booking_answer, run_to_end  # noqa: E402
from tests.test_scale_out import cluster_database  # noqa: E402
from tests.test_worker_faults import OwnRedis  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")
FLUSH = 11.0  # seconds for every backend's statistics to reach pg_stat_database


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


class Meter:
    """Redis commands, PostgreSQL transactions and workers' CPU, read before and after (no
    Redis and no PostgreSQL on the embedded defaults: those count 0)."""

    def __init__(self, env: dict[str, str], pids: list[int]) -> None:
        self.redis = redis.Redis.from_url(env["REDIS_URL"]) if env.get("REDIS_URL") else None
        self.database_url = env["DATABASE_URL"].replace("postgres://", "postgresql://")
        self.name = self.database_url.rsplit("/", 1)[1]
        self.pids = pids

    def _commands(self) -> int:
        if self.redis is None:
            return 0
        stats = self.redis.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")

    def _transactions(self) -> int:
        if not self.database_url.startswith("postgresql://"):
            return 0
        with psycopg.connect(self.database_url.rsplit("/", 1)[0] + "/postgres") as db:
            db.execute("SELECT pg_stat_clear_snapshot()")
            row = db.execute(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                (self.name,),
            ).fetchone()
        assert row is not None
        return int(row[0])  # this query's own transaction is in another database

    async def read(self) -> tuple[float, float, float, float]:
        """Redis commands, PostgreSQL transactions, CPU seconds, and when (monotonic)."""
        await asyncio.sleep(FLUSH)  # see the module docstring
        at = time.monotonic()
        return self._commands(), self._transactions(), cpu_seconds(self.pids), at


async def book(http: aiohttp.ClientSession, base: str, watch_on: str = "") -> int:
    """One booking through ``base``; with ``watch_on``, the conversation is open on that
    worker too (a second tab), which must see the booking end. The events of the booking."""
    chat = await RemoteChat.open(http, base)
    await chat.connect(base)
    watcher = None
    if watch_on:
        watcher = RemoteChat(http, chat.cookie, chat.conversation_id)
        await watcher.connect(watch_on)
    flight_id, seats = await chat.book_to_seat(timeout=30)
    await chat.answer(seats, seat_label=seat_map_for(flight_id).first_free())
    await chat.review_and_pay(timeout=30, base=base)
    await chat.next("tool_call", timeout=30, status="completed")
    await chat.next("assistant_message", timeout=30)
    if watcher is not None:
        await watcher.next("assistant_message", timeout=30)
        await watcher.close()
    await chat.close()
    return len(chat.events)


@contextmanager
def workers(
    env: dict[str, str], count: int, folder: Path
) -> Iterator[tuple[str, list[str], list[int]]]:
    """``count`` uvicorn workers (behind HAProxy when more than one): the address, each
    worker's own address, the pids."""
    ports = [free_port() for _ in range(count)]
    starts = (
        functools.partial(start_uvicorn, port, env, log=folder / f"worker-{port}.log")
        for port in ports
    )
    procs = start_each(*starts)
    proxy: subprocess.Popen[bytes] | None = None
    try:
        base = f"http://127.0.0.1:{ports[0]}"
        if count > 1:
            front = free_port()
            proxy = start_haproxy(front, ports, folder)
            base = f"http://127.0.0.1:{front}"
        yield base, [f"http://127.0.0.1:{port}" for port in ports], [proc.pid for proc in procs]
    finally:
        if proxy is not None:
            stop(proxy)
        for proc in procs:
            stop(proc)


async def chat_bookings(base: str, each: list[str], both: bool) -> Booker:
    """The chat's booking through ``base`` (or, ``both``, on the first worker and shown on
    the second)."""
    if both:
        base, watch_on = each[0], each[1]
    else:
        watch_on = ""

    async def booking(http: aiohttp.ClientSession) -> int:
        return await book(http, base, watch_on)

    return booking


async def mcp_bookings(base: str, how: str) -> Booker:
    """book_flight over MCP through ``base`` (the balancer): the official Python SDK's
    legacy client (pushed questions) or its 2026-07-28 client (input_required rounds, each
    retry wherever round robin sends it), or the Tasks extension (raw JSON-RPC, as ext-tasks
    clients speak it)."""
    url = f"{base}/mcp"

    async def legacy(http: aiohttp.ClientSession) -> int:
        async with Client(url, mode="legacy", elicitation_callback=Person()) as client:
            done = await client.call_tool("book_flight", ROUTE)
        assert not done.is_error and (done.structured_content or {}).get("booked"), done
        return 0

    async def rounds(http: aiohttp.ClientSession) -> int:
        flight = search_flights(ROUTE["origin"], ROUTE["destination"])[0].id
        async with Client(url, mode=MODERN, elicitation_callback=Person()) as client:
            key, state = await at_seat_question(client)
            review = await retry(client, state, seat_answer(key, free_seat(flight)))
            pay_key, pay_state = await paid_after_review(client, review)
            answer = {pay_key: types.ElicitResult(action="accept")}
            done = await retry(client, pay_state, answer)
        assert isinstance(done, types.CallToolResult) and not done.is_error, done
        return 0

    async def tasks(http: aiohttp.ClientSession) -> int:
        async with httpx.AsyncClient(timeout=60) as raw:
            client = PoliteTasks(raw, url)
            created = await client.call("book_flight", ROUTE)
            done = await run_to_end(client, created["taskId"], booking_answer)
        assert done["status"] == "completed", done
        return 0

    return {"legacy MCP": legacy, "MCP 2026-07-28": rounds, "MCP Tasks": tasks}[how]


class PoliteTasks(McpClient):
    """A Tasks client that polls a working task as often as the server asks
    (``pollIntervalMs``), as the extension has clients do, not as fast as it can."""

    async def settled(self, task_id: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            task = await self.get(task_id)
            if task["status"] != "working" or time.monotonic() > deadline:
                return task
            await asyncio.sleep(task.get("pollIntervalMs", 1000) / 1000)


async def phase(
    env: dict[str, str], count: int, bookings: int, folder: Path, setup: str, how: str = "chat"
) -> dict[str, Any]:
    """``bookings`` of ``how`` (the chat, the chat "shown on both" workers, or an MCP
    transport) on ``count`` workers; their cost per booking."""
    with workers(env, count, folder) as (base, each, pids):
        meter = Meter(env, pids)
        booking = (
            await chat_bookings(base, each, how == "shown on both")
            if how in ("chat", "shown on both")
            else await mcp_bookings(base, how)
        )
        async with aiohttp.ClientSession() as http:
            await booking(http)  # warm: first imports, first connections
            before = await meter.read()
            started = time.monotonic()
            events = 0
            for _ in range(bookings):
                events += await booking(http)
            took = time.monotonic() - started
            after = await meter.read()
        await asyncio.sleep(took)  # idle as long: what the workers do on their own
        idle = await meter.read()
    # What the workers do on their own (per second, from the idle phase) is taken out of the
    # bookings' phase, which lasted longer than the bookings (the wait for the statistics).
    quiet = [(i - a) / (idle[3] - after[3]) for i, a in zip(idle[:3], after[:3], strict=True)]
    span = after[3] - before[3]
    busy = [(a - b) - rate * span for a, b, rate in zip(after[:3], before[:3], quiet, strict=True)]
    return {
        "setup": setup,
        "events": events / bookings,
        "workers": count,
        "redis": busy[0] / bookings,
        "pg": busy[1] / bookings,
        "cpu_ms": busy[2] * 1000 / bookings,
        "idle_redis_s": quiet[0],
        "idle_pg_s": quiet[1],
        "seconds": took / bookings,
    }


@contextmanager
def embedded(folder: Path) -> Iterator[dict[str, str]]:
    """The environment of a worker on the embedded defaults: SQLite (migrated, in ``folder``),
    the in-memory channel layer."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env |= {
        "DJANGO_SETTINGS_MODULE": "chatbridge.settings",
        "DATABASE_URL": f"sqlite:///{folder / 'bench.sqlite3'}",
        "CHATBRIDGE_MCP_PUBLIC": "1",
    }
    migrate = [sys.executable, "manage.py", "migrate", "--noinput", "-v0"]
    subprocess.run(migrate, cwd=ROOT, env=env, check=True, timeout=120, capture_output=True)
    yield env


SQLITE = "1 worker, SQLite"
ROUND_ROBIN = "2 workers behind HAProxy"
# (workers, setup, what is booked): the chat alone, then every transport through the balancer.
PHASES = (
    (1, "1 worker", "chat"),
    (2, ROUND_ROBIN, "chat"),
    (2, "2 workers, shown on both", "shown on both"),
    (2, f"legacy MCP, {ROUND_ROBIN}", "legacy MCP"),
    (2, f"MCP 2026-07-28, {ROUND_ROBIN}", "MCP 2026-07-28"),
    (2, f"MCP Tasks, {ROUND_ROBIN}", "MCP Tasks"),
)
Booker = Callable[[aiohttp.ClientSession], Awaitable[int]]


def goals(results: list[dict[str, Any]]) -> list[list[str]]:
    """Each goal: what is measured, against its bound (issue 27's Redis fan-out, issue 28's
    transactions and CPU)."""
    by = {r["setup"]: r for r in results}
    sqlite, both = by[SQLITE], by["2 workers, shown on both"]
    cluster = [by["1 worker"], by[ROUND_ROBIN]]
    redis_most = max(r["redis"] for r in cluster)
    pg_most = max(r["pg"] for r in [*cluster, both])
    cpu_ratio = by["1 worker"]["cpu_ms"] / sqlite["cpu_ms"]
    through = [r for r in results if r["setup"].endswith(ROUND_ROBIN)]
    redis_rr = max(r["redis"] for r in through)
    pg_rr = max(r["pg"] for r in through)
    return [
        [
            "every transport through round robin: Redis commands a booking ≤ 30 (issue 40)",
            f"{redis_rr:.0f}",
            goal(redis_rr <= 30),
        ],
        [
            "every transport through round robin: PostgreSQL transactions a booking ≤ 25 "
            "(issue 40)",
            f"{pg_rr:.1f}",
            goal(pg_rr <= 25),
        ],
        [
            "Redis commands a booking whose sockets are on its worker ≤ 20 (issue 27)",
            f"{redis_most:.0f}",
            goal(redis_most <= 20),
        ],
        [
            "a conversation shown on two workers: about one Redis command an event "
            "(≤ events + 20) (issue 27)",
            f"{both['redis']:.0f} for {both['events']:.0f} events",
            goal(both["redis"] <= both["events"] + 20),
        ],
        [
            "PostgreSQL transactions a booking ≤ 20 (issue 28)",
            f"{pg_most:.1f}",
            goal(pg_most <= 20),
        ],
        [
            "server CPU a booking on PostgreSQL + Redis ≤ 1.3 × SQLite's (issue 28)",
            f"{by['1 worker']['cpu_ms']:.0f} / {sqlite['cpu_ms']:.0f} ms = {cpu_ratio:.2f}×",
            goal(cpu_ratio <= 1.3),
        ],
    ]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bookings", type=int, default=10)
    args = parser.parse_args()
    own = OwnRedis()
    own.start()
    results = []
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            cluster_database(own.url) as env,
        ):
            with embedded(Path(tmp)) as alone:
                results.append(await phase(alone, 1, args.bookings, Path(tmp), SQLITE))
            env = {**env, "CHATBRIDGE_MCP_PUBLIC": "1"}
            for count, setup, how in PHASES:
                results.append(await phase(env, count, args.bookings, Path(tmp), setup, how))
    finally:
        own.kill()

    def counted(r: dict[str, Any], key: str, form: str) -> str:
        """SQLite's setup uses neither Redis nor PostgreSQL: nothing of theirs to count."""
        return "–" if r["setup"].endswith("SQLite") else format(r[key], form)

    rows = [
        [
            r["setup"],
            f"{r['events']:.0f}",
            counted(r, "redis", ".0f"),
            counted(r, "pg", ".1f"),
            f"{r['cpu_ms']:.0f}",
            f"{r['seconds']:.2f}",
            counted(r, "idle_redis_s", ".1f"),
            counted(r, "idle_pg_s", ".1f"),
        ]
        for r in results
    ]
    headers = [
        "setup",
        "events / booking",
        "Redis commands / booking",
        "PostgreSQL transactions / booking",
        "server CPU ms / booking",
        "s / booking",
        "idle Redis commands / s",
        "idle PostgreSQL transactions / s",
    ]
    body = (
        f"{args.bookings} bookings one after the other per setup "
        "(after one to warm up): chat bookings through the JSON socket and the payment page "
        "over HTTP (with two workers, through HAProxy; or on the first worker with the "
        "conversation open on the second too, which sees every event), and MCP bookings of "
        "book_flight through HAProxy's round robin on each transport (the official Python "
        "SDK's legacy and 2026-07-28 clients, the Tasks extension over raw JSON-RPC; the "
        "payment page over HTTP through the balancer too); "
        "what the workers do on their own meanwhile (the idle columns, measured as long again "
        "without bookings) is taken out.\n\n"
        + table(headers, rows)
        + "\n\n"
        + table(["goal", "measured", "status"], goals(results))
    )
    append_results("Cluster: cost per booking (bench/cluster.py)", body)


if __name__ == "__main__":
    asyncio.run(main())
