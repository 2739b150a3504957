"""The outage and race harness (issue 40, ``make chaos``): faults longer than a blip, at
hundreds of bookings, and what became of each booking for the world.

Every booking is of ``buy_ticket`` (tests/outage_plugin.py): the person pays (an answer that
commits the call), then a ticket office outside the servers issues the ticket under the step's
idempotency key, and counts what it issues. So a ticket issued twice for one payment is seen
by the world's own books, not only by the journal.

1. **PostgreSQL outages mid-step**, on a private cluster and one production worker (its retry
   window the default 30 s): the database stops while the office works on the ticket, and stays
   away 20 s (inside the window), 40 s and 120 s (past it). The chat and a Task alternate.
2. **Kills and Redis restarts under load**: two workers behind HAProxy (round robin), on
   PostgreSQL and a Redis of the harness's own; clients book over the chat, legacy MCP,
   2026-07-28 rounds and MCP Tasks at once, while a fault is injected every few seconds: a
   worker killed (kill -9, started again a second later) or Redis stopped for 5 s.
3. The commitment race harness of ``make race`` (abort racing the payment page).

Each booking is then read on record and in the office's books: booked once, not booked (no
ticket; told so), doubled (two tickets for one call), paid without ticket (a committed call
ended without a ticket and without its refund), or left live; and whether what its client was
told agrees with the record.

    .venv/bin/python bench/chaos.py [--outages 20,40,120] [--bookings 300] [--race 200]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbridge.settings")

import django  # noqa: E402

django.setup()

import aiohttp  # noqa: E402
import httpx  # noqa: E402
import mcp_types as types  # noqa: E402
import psycopg  # noqa: E402
from mcp import Client  # noqa: E402

from bench.common import append_results, table  # noqa: E402
from tests.balancer import start_haproxy  # noqa: E402
from tests.chat_http import RemoteChat  # noqa: E402
from tests.outage_plugin import TicketOffice, ticket_office  # noqa: E402
from tests.private_postgres import PrivatePostgres, pg_bin  # noqa: E402
from tests.production import production_env  # noqa: E402
from tests.servers import ROOT, free_port, start_each, start_uvicorn, stop  # noqa: E402
from tests.test_mcp_tasks import McpClient, question  # noqa: E402
from tests.test_scale_out import cluster_database  # noqa: E402
from tests.test_worker_faults import OwnRedis  # noqa: E402

CARD: dict[str, str | int | float | bool | list[str] | None] = {"card": "4242424242424242"}
TRANSPORTS = ("chat", "legacy MCP", "MCP 2026-07-28", "MCP Tasks")
SETTLE = 180.0  # seconds a booking may take to end on record once the faults have stopped


@dataclass
class Booking:
    """One booking: its route (the office's books by it), transport, call, what its client
    was told, and what the record and the office say once everything has settled."""

    route: str
    transport: str
    call_id: str = ""
    told: str = ""  # "booked <ticket>", "not booked: …", or "no answer: …"
    status: str = ""
    tickets: list[str] = field(default_factory=list)
    recorded: Any = None
    committed: bool = False
    refunded: bool = False

    def verdict(self) -> str:
        if self.status in ("running", "awaiting_elicit", "awaiting_sample", ""):
            return "left live"
        if len(self.tickets) > 1:
            return "doubled"
        if self.committed and not self.tickets and not self.refunded:
            return "paid without ticket"
        return "booked once" if self.tickets else "not booked"

    def truthful(self) -> bool:
        """What the client was told agrees with the record (no answer is not a lie: the
        client was cut off, its outcome is on record)."""
        if self.told.startswith("no answer"):
            return True
        booked = isinstance(self.recorded, dict) and self.recorded.get("booked") is True
        if self.told.startswith("booked "):
            return booked and self.told.split(" ", 1)[1] in self.tickets
        return not booked


def route_of(n: int) -> tuple[str, str]:
    """A route of its own for booking ``n`` (the office counts tickets by route)."""
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    return f"X{letters[n % 24]}{letters[n // 24 % 24]}", f"Y{letters[n // 576 % 24]}Z"


async def book(base: str, booking: Booking, origin: str, destination: str) -> None:
    """Book over ``booking.transport`` through ``base``; note what the client was told."""
    try:
        booking.told = await asyncio.wait_for(
            TRANSPORT_BOOKERS[booking.transport](base, booking, origin, destination), 240
        )
    except Exception as exc:  # cut off by a fault: what became of it is read on record
        booking.told = f"no answer: {type(exc).__name__}: {str(exc)[:120]}"


def told_of(result: dict[str, Any] | None, error: str = "") -> str:
    if isinstance(result, dict) and result.get("booked") is True:
        return f"booked {result.get('ticket')}"
    return f"not booked: {error or json.dumps(result)[:120]}"


async def chat_booking(base: str, b: Booking, origin: str, destination: str) -> str:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        chat = await RemoteChat.open(http, base)
        await chat.connect(base)
        await chat.send(
            {"type": "user_message", "text": f"Buy ticket from {origin} to {destination}"}
        )
        form = await chat.next("elicit", 60, key="pay")
        b.call_id = form["call_id"]
        await chat.answer(form, **CARD)
        while True:
            event = await chat.next("tool_call", 180)
            if event.get("status") in ("completed", "failed", "aborted"):
                await chat.close()
                return told_of(event.get("result"), str(event.get("error") or event.get("status")))


async def legacy_booking(base: str, b: Booking, origin: str, destination: str) -> str:
    async def pay(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content=CARD)

    async with Client(f"{base}/mcp", mode="legacy", elicitation_callback=pay) as client:
        done = await client.call_tool("buy_ticket", {"origin": origin, "destination": destination})
    text = " ".join(c.text for c in done.content if isinstance(c, types.TextContent))
    return told_of(done.structured_content, text) if not done.is_error else f"not booked: {text}"


async def rounds_booking(base: str, b: Booking, origin: str, destination: str) -> str:
    arguments = {"origin": origin, "destination": destination}
    async with Client(f"{base}/mcp", mode="2026-07-28", elicitation_callback=_never) as client:
        first = await client.session.call_tool("buy_ticket", arguments, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult), first
        [key] = first.input_requests
        done = await client.session.call_tool(
            "buy_ticket",
            arguments,
            allow_input_required=True,
            input_responses={key: types.ElicitResult(action="accept", content=CARD)},
            request_state=first.request_state,
        )
    assert isinstance(done, types.CallToolResult), done
    text = " ".join(c.text for c in done.content if isinstance(c, types.TextContent))
    return told_of(done.structured_content, text) if not done.is_error else f"not booked: {text}"


async def _never(context: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content=CARD)


async def task_booking(base: str, b: Booking, origin: str, destination: str) -> str:
    async with httpx.AsyncClient(timeout=60) as http:
        client = McpClient(http, f"{base}/mcp")
        created = await client.call("buy_ticket", {"origin": origin, "destination": destination})
        task_id = b.call_id = created["taskId"]
        key, _, _ = question(await client.settled(task_id))
        await client.update(task_id, {key: {"action": "accept", "content": CARD}})
        deadline = time.monotonic() + 180
        while True:  # a fault may cut a request off: ask again, as a client does
            try:
                task = await client.settled(task_id, timeout=30)
            except Exception:
                task = {"status": "working"}
            if task["status"] not in ("working", "input_required") or time.monotonic() > deadline:
                break
            await asyncio.sleep(1)  # the client's poll interval
    result = (task.get("result") or {}).get("structuredContent")
    return told_of(result, str(task.get("statusMessage") or task["status"]))


TRANSPORT_BOOKERS: dict[str, Callable[[str, Booking, str, str], Awaitable[str]]] = {
    "chat": chat_booking,
    "legacy MCP": legacy_booking,
    "MCP 2026-07-28": rounds_booking,
    "MCP Tasks": task_booking,
}


def settle(url: str, office: TicketOffice, bookings: list[Booking]) -> None:
    """Read each booking on record once every call has ended (or ``SETTLE`` has passed)."""
    deadline = time.monotonic() + SETTLE
    with psycopg.connect(url.replace("postgres://", "postgresql://"), autocommit=True) as db:
        while True:
            for b in bookings:
                o, d = b.route.split("-")
                row = db.execute(
                    "SELECT id, status, result, committed, commitment FROM "
                    "chatbridge_chat_toolsession WHERE tool_name = 'buy_ticket' AND "
                    "arguments->>'origin' = %s AND arguments->>'destination' = %s",
                    (o, d),
                ).fetchone()
                if row is None:
                    b.status = "never started"
                    continue
                b.call_id, b.status, b.recorded, committed, commitment = row
                b.committed = bool(committed)
                b.refunded = bool(commitment and commitment.get("outcome") == "compensated")
                b.tickets = office.issued(b.route)
            if all(b.verdict() != "left live" for b in bookings) or time.monotonic() > deadline:
                return
            time.sleep(1)


def tally(name: str, faults: Counter[str], bookings: list[Booking]) -> list[Any]:
    for b in bookings:
        if b.verdict() not in ("booked once", "not booked") or not b.truthful():
            print(
                f"{name}: {b.transport} {b.call_id} {b.verdict()}: status {b.status}, "
                f"tickets {b.tickets}, told {b.told!r}"
            )
    why_not = Counter(b.told[:100] for b in bookings if b.verdict() == "not booked")
    for told, times in why_not.most_common():
        print(f"{name}: not booked ({times}): {told}")
    verdicts = Counter(b.verdict() for b in bookings)
    lies = sum(1 for b in bookings if not b.truthful())
    return [
        name,
        ", ".join(f"{k} {v}" for k, v in sorted(faults.items())) or "–",
        len(bookings),
        verdicts["booked once"],
        verdicts["not booked"],
        verdicts["doubled"],
        verdicts["paid without ticket"],
        verdicts["left live"] + verdicts["never started"],
        lies,
    ]


# -- 1. PostgreSQL outages mid-step --------------------------------------------------------


async def outages(lengths: list[float], trials: int, tmp: Path) -> list[list[Any]]:
    bin_dir = pg_bin()
    assert bin_dir is not None, "PostgreSQL's server programs are not installed"
    rows = []
    pg = PrivatePostgres(bin_dir)
    pg.start()
    try:
        with ticket_office() as office:
            env = production_env(
                tmp,
                DJANGO_SETTINGS_MODULE="tests.outage_settings",
                DATABASE_URL=pg.url,
                CHATBRIDGE_MCP_PUBLIC="1",
                TICKET_OFFICE_URL=office.url,
                DJANGO_STATIC_ROOT=str(ROOT / "staticfiles"),
            )
            migrate = [sys.executable, "manage.py", "migrate", "--noinput", "-v0"]
            subprocess.run(migrate, cwd=ROOT, env=env, check=True, timeout=180)
            port = free_port()
            server = start_uvicorn(port, env, log=tmp / "outages.log")
            base = f"http://127.0.0.1:{port}"
            n = 0
            try:
                for length in lengths:
                    bookings = []
                    for trial in range(trials):
                        for transport in ("chat", "MCP Tasks"):
                            n += 1
                            origin, destination = route_of(n)
                            b = Booking(f"{origin}-{destination}", transport)
                            bookings.append(b)
                            office.hold()
                            going = asyncio.create_task(book(base, b, origin, destination))
                            assert await asyncio.to_thread(office.reached.wait, 60)
                            await asyncio.to_thread(pg.stop)
                            office.release()
                            await asyncio.sleep(length)  # the outage's length
                            await asyncio.to_thread(pg.start)
                            back = time.monotonic()
                            await going
                            print(
                                f"outage {length:.0f} s, {transport}: told {b.told!r} "
                                f"{time.monotonic() - back:.1f} s after the database came back"
                            )
                    await asyncio.to_thread(settle, pg.url, office, bookings)
                    faults = Counter({f"PostgreSQL down {length:.0f} s": len(bookings)})
                    rows.append(tally(f"outage {length:.0f} s mid-step", faults, bookings))
            finally:
                stop(server)
    finally:
        pg.remove()
    return rows


# -- 2. kills and Redis restarts under load ------------------------------------------------


async def storm(count: int, concurrency: int, every: float, tmp: Path) -> list[list[Any]]:
    redis = OwnRedis()
    redis.start()
    faults: Counter[str] = Counter()
    bookings: list[Booking] = []
    try:
        with cluster_database(redis.url) as base_env, ticket_office() as office:
            env = {
                **base_env,
                "DJANGO_SETTINGS_MODULE": "tests.outage_settings",
                "CHATBRIDGE_MCP_PUBLIC": "1",
                "TICKET_OFFICE_URL": office.url,
                "CHATBRIDGE_COMMITMENT_SWEEP": "1",
            }
            ports = [free_port(), free_port()]
            start = [
                functools.partial(start_uvicorn, p, env, log=tmp / f"storm-{p}.log") for p in ports
            ]
            procs = start_each(*start)
            front = free_port()
            proxy = start_haproxy(front, ports, tmp)
            base = f"http://127.0.0.1:{front}"
            done = asyncio.Event()

            async def inject() -> None:
                rng = random.Random(40)
                kill = True
                while not done.is_set():
                    await asyncio.sleep(every)  # the fault rate, not a synchronisation
                    if done.is_set():
                        return
                    kill = not kill  # in turn: a worker killed, Redis stopped
                    if kill:
                        i = rng.randrange(len(procs))
                        procs[i].send_signal(signal.SIGKILL)
                        procs[i].wait()
                        faults["worker killed (kill -9)"] += 1
                        await asyncio.sleep(1)
                        procs[i] = start_uvicorn(ports[i], env, log=tmp / f"storm-{ports[i]}.log")
                    else:
                        redis.kill()
                        faults["Redis down 5 s"] += 1
                        await asyncio.sleep(5)
                        redis.start()

            async def client(k: int) -> None:
                for n in range(k, count, concurrency):
                    origin, destination = route_of(100_000 + n)
                    b = Booking(f"{origin}-{destination}", TRANSPORTS[n % len(TRANSPORTS)])
                    bookings.append(b)
                    await book(base, b, origin, destination)

            injector = asyncio.create_task(inject())
            try:
                await asyncio.gather(*(client(k) for k in range(concurrency)))
            finally:
                done.set()
                await injector
            await asyncio.to_thread(settle, env["DATABASE_URL"], office, bookings)
            stop(proxy)
            for proc in procs:
                stop(proc)
    finally:
        if redis.proc is not None and redis.proc.poll() is None:
            redis.kill()
    rows = [tally("kills and Redis restarts, all transports", faults, bookings)]
    for transport in TRANSPORTS:
        mine = [b for b in bookings if b.transport == transport]
        rows.append(tally(f"  of which {transport}", Counter(), mine))
    return rows


def race(trials: int) -> list[Any]:
    """The commitment race harness (tests/test_commitment_races.py, test_commitment_restarts.py)."""
    env = {**os.environ, "CHATBRIDGE_RACE_TRIALS": str(trials)}
    command = [
        sys.executable, "-m", "pytest", "tests/test_commitment_races.py",
        "tests/test_commitment_restarts.py", "-p", "no:cacheprovider", "-q", "--timeout", "3600",
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-200:]
    return [f"abort racing the payment ({trials} trials a path)", summary, run.returncode == 0]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--outages", default="20,40,120", help="seconds, comma-separated")
    parser.add_argument("--outage-trials", type=int, default=1)
    parser.add_argument("--bookings", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--every", type=float, default=3.0, help="seconds between faults")
    parser.add_argument("--race", type=int, default=200)
    args = parser.parse_args()
    rows: list[list[Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        lengths = [float(s) for s in args.outages.split(",") if s.strip()]
        if lengths:
            rows += await outages(lengths, args.outage_trials, tmp)
        if args.bookings:
            rows += await storm(args.bookings, args.concurrency, args.every, tmp)
    races = [race(args.race)] if args.race else []
    headers = [
        "harness", "faults injected", "bookings", "booked once", "not booked", "doubled",
        "paid without ticket", "left live", "told other than the record",
    ]  # fmt: skip
    body = (
        "Each booking is buy_ticket (tests/outage_plugin.py): a payment that commits the call, "
        "then a ticket from an office outside the servers, which counts what it issues under "
        "the step's idempotency key.\n\n" + table(headers, rows)
    )
    if races:
        body += "\n\n" + table(["race harness", "pytest", "passed"], races)
    append_results("Chaos: outages, kills and races (bench/chaos.py)", body)


if __name__ == "__main__":
    asyncio.run(main())
