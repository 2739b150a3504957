"""Capacity of one worker: a ladder of offered booking rates, against the litellm floor.

Each rung is a fresh production server (uvicorn, ``DJANGO_DEBUG=0``, the per-socket rate limit
lifted as in ``load.py``) on a fresh copy of a migrated database, offered ``rate`` bookings per
second for ``--seconds`` seconds: ``rate × seconds`` browsers, browser i arriving at
``t0 + i / rate`` whatever the server does (open loop). Each browser opens the page (GET /, its
own cookie and conversation) and its socket, then books once as in ``load.py`` (message →
pick_flight → pick_seat → review → payment page → completed, ``--think`` s before each answer).
A rung passes with every booking completed, zero errors and p99 flight→seat (pick_flight answer
sent → pick_seat form received) ≤ 50 ms. The ladder stops at the first rung that misses, then
tries the midpoint between the last pass and that miss once (``--no-bisect`` to skip).
Capacity = the highest passing rate. Server CPU (``/proc/PID/stat`` utime + stime, before and
after the rung) per completed booking is printed per rung: the figure to optimise.

1. SQLite + in-memory channel layer, one worker (the embedded default): capacity against the
   litellm floor measured in the same run (``floor.measure_floor``, in a child process before
   any server starts). Goal: capacity ≥ 50 % of the floor.
2. Redis + PostgreSQL (a database created for the run from a migrated template and dropped,
   a unique ``CHATBRIDGE_REDIS_PREFIX`` per rung): the ladder for 1 worker and for 2 workers
   (two uvicorn processes on two ports; browsers assigned round-robin, as a load balancer
   would). The machine's cores are shared by the workers and the load client.

    .venv/bin/python bench/capacity.py [--ladder 2,5,10,15,20,30,40,60,80] [--seconds 15]
        [--pg-ladder ...] [--pg-seconds 15] [--completions 200] [--skip-pg]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    BenchSite,
    append_results,
    free_port,
    goal,
    http_session,
    pct,
    raise_nofile,
    stop,
    summary_ms,
    table,
)
from bench.floor import floor_rows, measure_floor  # noqa: E402
from bench.load import Stats, visit  # noqa: E402

P99_LIMIT_MS = 50.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def parse_rates(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


# -- one rung ---------------------------------------------------------------------------------


async def offer(
    bases: list[str], rate: float, seconds: float, think: float, timeout: float, grace: float
) -> tuple[Stats, int, float]:
    """Offer ``rate`` visits per second for ``seconds`` s, round-robin over ``bases``."""
    n = max(1, round(rate * seconds))
    stats = Stats()
    async with http_session() as http:
        t0 = time.perf_counter() + 0.2
        flows = [
            asyncio.create_task(
                visit(http, bases[i % len(bases)], stats, t0 + i / rate, think, timeout)
            )
            for i in range(n)
        ]
        _, late = await asyncio.wait(flows, timeout=seconds + grace)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)
            stats.errors += [f"not finished {grace:.0f} s after the last arrival"] * len(late)
        wall = time.perf_counter() - t0
    return stats, n, wall


def rung(
    site: BenchSite,
    workers: int,
    rate: float,
    args: argparse.Namespace,
    seconds: float,
    env: Callable[[], tuple[dict[str, str], Callable[[], None]]],
) -> dict[str, Any]:
    """Fresh servers (``env()`` gives their environment and a clean-up), one offered rate."""
    extra, cleanup = env()
    procs = []
    try:
        ports = []
        for _ in range(workers):
            port = free_port()
            procs.append(site.start("uvicorn", port, env=extra))
            ports.append(port)
        bases = [f"http://127.0.0.1:{p}" for p in ports]
        # A fresh server's first bookings load what the rest reuse (litellm's first completion
        # reads its tokenizer, templates compile): a few bookings per worker first, not counted.
        asyncio.run(offer(bases, 2.0 * workers, args.warm, args.think, args.timeout, args.grace))
        cpu0 = sum(cpu_s(p.pid) for p in procs)
        client0 = time.process_time()
        stats, n, wall = asyncio.run(
            offer(bases, rate, seconds, args.think, args.timeout, args.grace)
        )
        client = time.process_time() - client0
        cpu = sum(cpu_s(p.pid) for p in procs) - cpu0
    finally:
        for proc in procs:
            stop(proc)
        cleanup()
    flight, seat = summary_ms(stats.flight_rt), summary_ms(stats.seat_rt)
    first, opened = summary_ms(stats.first_form), summary_ms(stats.open_rt)
    lag_ms = pct(stats.start_lag, 0.99) * 1000 if stats.start_lag else float("nan")
    errors = len(stats.errors)
    ok = errors == 0 and stats.completed == n and flight["p99"] <= P99_LIMIT_MS
    res = {
        "rate": rate,
        "workers": workers,
        "chats": n,
        "completed": stats.completed,
        "errors": errors,
        "flight": flight,
        "seat": seat,
        "first": first,
        "open": opened,
        "lag_p99_ms": lag_ms,
        "cpu_s": cpu,
        "cpu_per_booking_ms": cpu / stats.completed * 1000 if stats.completed else float("nan"),
        "frames": sum(stats.frames) / len(stats.frames) if stats.frames else float("nan"),
        "server_util": cpu / wall if wall else float("nan"),
        "client_cpu_s": client,
        "wall_s": wall,
        "ok": ok,
        "first_errors": stats.errors[:3],
    }
    print(
        f"  {workers} worker(s) {rate:g}/s: {stats.completed}/{n} done, {errors} errors, "
        f"flight→seat p50 {flight['p50']:.1f} p99 {flight['p99']:.1f} ms, server CPU "
        f"{res['cpu_per_booking_ms']:.1f} ms/booking ({res['server_util']:.0%} of a core), "
        f"client CPU {client:.1f} s, start lag p99 {lag_ms:.1f} ms → {'pass' if ok else 'MISS'}"
        + (f"; first error: {stats.errors[0]}" if stats.errors else ""),
        flush=True,
    )
    return res


def ladder(
    rates: list[float], bisect: bool, run_rung: Callable[[float], dict[str, Any]]
) -> tuple[list[dict[str, Any]], float]:
    """Rungs in order until the first miss, then (``bisect``) the midpoint once."""
    rows: list[dict[str, Any]] = []
    passed: float | None = None
    missed: float | None = None
    for rate in rates:
        res = run_rung(rate)
        rows.append(res)
        if res["ok"]:
            passed = rate
        else:
            missed = rate
            break
    if bisect and passed is not None and missed is not None and missed - passed >= 2:
        mid = float(round((passed + missed) / 2))
        res = run_rung(mid)
        rows.append(res)
        if res["ok"]:
            passed = mid
    return rows, passed or 0.0


def rung_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [
            f"{r['rate']:g}",
            r["chats"],
            r["completed"],
            r["errors"],
            r["flight"]["p50"],
            r["flight"]["p99"],
            r["seat"]["p99"],
            r["first"]["p99"],
            r["open"]["p99"],
            r["cpu_per_booking_ms"],
            r["frames"],
            f"{r['server_util']:.0%}",
            r["client_cpu_s"],
            r["lag_p99_ms"],
            "pass" if r["ok"] else "MISS",
        ]
        for r in rows
    ]


RUNG_HEADERS = [
    "bookings/s", "chats", "done", "errors", "flight→seat p50 ms", "p99 ms", "seat→review p99",
    "message→first form p99", "page+socket open p99", "server CPU ms/booking",
    "frames/booking", "server CPU/wall", "client CPU s", "client start lag p99 ms", "rung",
]  # fmt: skip


# -- databases --------------------------------------------------------------------------------


def sqlite_copies(site: BenchSite) -> Callable[[], tuple[dict[str, str], Callable[[], None]]]:
    """A fresh copy of the site's migrated SQLite file per rung."""
    template = Path(site.env["DATABASE_URL"].removeprefix("sqlite:///"))
    counter = iter(range(1_000_000))

    def make() -> tuple[dict[str, str], Callable[[], None]]:
        folder = site.tmp / f"rung-{next(counter)}"
        folder.mkdir()
        for f in template.parent.glob(template.name + "*"):  # the file, and any -wal / -shm
            shutil.copy(f, folder / f.name)
        url = f"sqlite:///{folder / template.name}"
        return {"DATABASE_URL": url}, lambda: shutil.rmtree(folder, ignore_errors=True)

    return make


class PostgresRedis:
    """A migrated template database; per rung a database cloned from it and a Redis prefix."""

    def __init__(self, pg: str, redis_url: str) -> None:
        import psycopg

        self.pg, self.redis_url = pg.rstrip("/"), redis_url
        self.tag = f"cbbench_{secrets.token_hex(4)}"
        self.template = f"{self.tag}_tpl"
        self.admin = psycopg.connect(f"{self.pg}/postgres", autocommit=True)
        self.created: list[str] = []
        self._sql(f'CREATE DATABASE "{self.template}"')
        self.created.append(self.template)
        self.counter = iter(range(1_000_000))

    def _sql(self, sql: str) -> None:
        self.admin.execute(sql.encode())

    def site(self) -> BenchSite:
        return BenchSite(plugin_settings=False, db_url=f"{self.pg}/{self.template}")

    def make(self) -> tuple[dict[str, str], Callable[[], None]]:
        name = f"{self.tag}_{next(self.counter)}"
        self._sql(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.created.append(name)
        prefix = f"{name}-"
        env = {
            "DATABASE_URL": f"{self.pg}/{name}",
            "REDIS_URL": self.redis_url,
            "CHATBRIDGE_REDIS_PREFIX": prefix,
        }

        def cleanup() -> None:
            self._drop(name)
            self._forget_redis(prefix)

        return env, cleanup

    def _drop(self, name: str) -> None:
        self._sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.created:
            self.created.remove(name)

    def _forget_redis(self, prefix: str) -> None:
        import redis

        client = redis.Redis.from_url(self.redis_url)
        try:
            keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
        finally:
            client.close()

    def close(self) -> None:
        for name in list(reversed(self.created)):
            self._drop(name)
        self.admin.close()


# -- main -------------------------------------------------------------------------------------


def capacity_cause(rows: list[dict[str, Any]], floor: dict[str, Any]) -> str:
    """Why one worker falls short, from this run's figures: what a booking costs the worker
    against its three completions, and how busy the worker was where the p99 broke."""
    done = [r for r in rows if r["completed"]]
    if not done:
        return "no rung completed a booking"
    cpu = min(r["cpu_per_booking_ms"] for r in done)
    completions = 3 * floor["cpu_per_completion_s"] * 1000
    missed = [r for r in done if not r["ok"]]
    where = (
        f"; the first rung missed ({missed[0]['rate']:g}/s) had the worker at "
        f"{missed[0]['server_util']:.0%} of a core, p99 flight→seat {missed[0]['flight']['p99']:.0f} ms"
        if missed
        else ""
    )
    return (
        f"a booking costs the worker {cpu:.0f} ms of CPU, its three completions "
        f"{completions:.0f} ms of it ({completions / cpu:.0%}): one core does at most "
        f"{1000 / cpu:.0f} bookings/s, against the {floor['floor_per_s'] / 2:.0f}/s the goal asks"
        + where
    )


def floor_in_child(completions: int, warmup: int) -> dict[str, Any]:
    """``measure_floor`` in a fresh process: litellm's threads stay out of the load client."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(measure_floor, completions, warmup).result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ladder", default="2,5,10,15,20,30,40,60,80", help="bookings/s")
    parser.add_argument("--seconds", type=float, default=15.0, help="arrivals last this long")
    parser.add_argument("--pg-ladder", default="", help="Redis + PostgreSQL ladder (--ladder)")
    parser.add_argument("--pg-seconds", type=float, default=0, help="(--seconds)")
    parser.add_argument("--skip-pg", action="store_true", help="only the SQLite worker")
    parser.add_argument("--no-bisect", action="store_true")
    parser.add_argument("--think", type=float, default=0.5, help="s before each answer (±50 %%)")
    parser.add_argument("--timeout", type=float, default=30.0, help="s for any one event")
    parser.add_argument("--grace", type=float, default=30.0, help="s after the last arrival")
    parser.add_argument(
        "--warm", type=float, default=3.0, help="s of warm-up bookings (2/s a worker) per rung"
    )
    parser.add_argument("--completions", type=int, default=200, help="floor: timed completions")
    parser.add_argument("--warmup", type=int, default=40, help="floor: warm-up completions")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument(
        "--redis", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    args = parser.parse_args()
    raise_nofile(65536)
    rates = parse_rates(args.ladder)
    pg_rates = parse_rates(args.pg_ladder) if args.pg_ladder else rates
    pg_seconds = args.pg_seconds or args.seconds
    bisect = not args.no_bisect

    print("floor: timing offline completions ...", flush=True)
    floor = floor_in_child(args.completions, args.warmup)
    print(
        f"  CPU per completion {floor['cpu_per_completion_s'] * 1000:.2f} ms, "
        f"floor {floor['floor_per_s']:.1f} bookings/s",
        flush=True,
    )

    print("SQLite + in-memory layer, 1 uvicorn worker:", flush=True)
    site = BenchSite(plugin_settings=False)
    copies = sqlite_copies(site)
    try:
        sqlite_rows, capacity = ladder(
            rates, bisect, lambda r: rung(site, 1, r, args, args.seconds, copies)
        )
    finally:
        shutil.rmtree(site.tmp, ignore_errors=True)
    ratio = capacity / floor["floor_per_s"]

    pg_results: dict[int, tuple[list[dict[str, Any]], float]] = {}
    pg_note = ""
    if not args.skip_pg:
        with ExitStack() as stack:
            backing = PostgresRedis(args.pg, args.redis)
            stack.callback(backing.close)
            pg_site = backing.site()
            stack.callback(shutil.rmtree, pg_site.tmp, True)
            for workers in (1, 2):
                print(f"Redis + PostgreSQL, {workers} uvicorn worker(s):", flush=True)

                def pg_rung(rate: float, w: int = workers) -> dict[str, Any]:
                    return rung(pg_site, w, rate, args, pg_seconds, backing.make)

                pg_results[workers] = ladder(pg_rates, bisect, pg_rung)
    else:
        pg_note = "Redis + PostgreSQL skipped (`--skip-pg`)."

    intro = (
        f"Production server: uvicorn (`--lifespan on --ws websockets`), DJANGO_DEBUG=0, the "
        f"per-socket rate limit lifted; each rung a fresh server on a fresh copy of a migrated "
        f"database, warmed up with {args.warm:g} s of bookings at 2/s a worker (not counted). "
        f"Open loop: rate × {args.seconds:g} s browsers arrive at fixed times "
        f"(i / rate), each opens the page and its socket and books once (think "
        f"{args.think:g} s ± 50 % before each answer, the payment page posted). A rung passes "
        f"with every booking done, zero errors and p99 flight→seat ≤ {P99_LIMIT_MS:g} ms; the "
        f"ladder stops at the first miss"
        + (", then tries the midpoint once" if bisect else "")
        + ". Server CPU = utime + stime of the server process(es) over the rung "
        "(/proc/PID/stat); frames/booking = WebSocket frames a browser received from its "
        "socket's opening to its booking's end (fewer when its socket fell behind and its "
        "events went coalesced); client start lag = how late the load client itself started a "
        "browser against the schedule (large: the rate was not really offered)."
    )
    body = [
        intro,
        "",
        "Litellm floor (`floor.measure_floor`, in a child process before any server started):",
        "",
        table(["fact", "value"], floor_rows(floor)),
        "",
        "One worker, SQLite + in-memory channel layer:",
        "",
        table(RUNG_HEADERS, rung_rows(sqlite_rows)),
    ]
    goals = [
        [
            "capacity of one worker ≥ 50 % of the litellm floor",
            f"{capacity:g} / {floor['floor_per_s']:.1f} bookings/s = {ratio:.0%}",
            goal(ratio >= 0.5),
            "" if ratio >= 0.5 else capacity_cause(sqlite_rows, floor),
        ]
    ]
    if pg_results:
        one, two = pg_results[1][1], pg_results[2][1]
        body += [
            "",
            f"Redis (`{args.redis}`, a unique prefix per rung) + PostgreSQL (a database cloned "
            f"per rung from a migrated template, dropped after), rate × {pg_seconds:g} s "
            "browsers. **This machine has "
            f"{os.cpu_count()} cores, shared by the worker(s) and the load client** (its CPU "
            "per rung is in the table): two workers cannot get two free cores here, so the "
            "2-worker figure understates what two workers on their own cores would do.",
        ]
        for workers in (1, 2):
            body += [
                "",
                f"{workers} uvicorn worker(s)"
                + (", browsers round-robin across the two ports:" if workers == 2 else ":"),
                "",
                table(RUNG_HEADERS, rung_rows(pg_results[workers][0])),
            ]
        # A figure, not a goal (issue 28): what a booking costs the shared services is
        # bounded, and can fail, in bench/cluster.py.
        scaled = f" ({two / one:.2f}×)" if one else ""
        body += [
            "",
            f"Redis + PostgreSQL capacity (reported, not a goal; 2 cores shared with the "
            f"client): 1 worker {one:g}/s, 2 workers {two:g}/s{scaled}.",
        ]
    elif pg_note:
        body += ["", pg_note]
    body += ["", table(["goal", "measured", "status", "why (missed)"], goals)]
    misses = [
        f"{r['workers']}w {r['rate']:g}/s: `{e}`"
        for rows in [sqlite_rows, *(v[0] for v in pg_results.values())]
        for r in rows
        for e in r["first_errors"][:1]
    ]
    if misses:
        body += ["", "First errors: " + "; ".join(misses[:6])]
    append_results(
        "Capacity: booking-rate ladder on uvicorn, against the litellm floor", "\n".join(body)
    )


if __name__ == "__main__":
    main()
