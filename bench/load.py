"""Load: N concurrent chats each booking a flight against one worker, real WebSockets.

Every chat is a separate browser (own cookie, own conversation, own socket; aiohttp). All N
sockets are opened first, in batches (the ramp), and stay open. Then each chat runs the whole
flow: "Book a flight from JFK to LAX" → pick_flight form → answer → pick_seat form → answer →
review form → confirm → payment link → the payment page (GET, POST a test card) → tool
completed → turn done. Chats start spread over ``--spread`` seconds and think
``--think`` seconds before each answer (people do), so N chats are in flight at once.

Elicit round trip = answer sent → next form received: pick_flight → pick_seat, and pick_seat →
review (the payment page is not timed). Goal: p99 ≤ 50 ms with zero errors at N = 1000.

    .venv/bin/python bench/load.py [--chats 1000] [--spread 20] [--think 0.5] [--server uvicorn]

The server is daphne unless ``--server uvicorn`` (the production command's server).
``booking`` and ``visit`` (a browser arriving at a fixed time: open the page and its socket,
then book) are the flow ``capacity.py`` offers at fixed rates.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    BenchSite,
    Chat,
    append_results,
    free_port,
    free_seat,
    goal,
    http_session,
    raise_nofile,
    rss_kib,
    stop,
    summary_ms,
    table,
)


class Stats:
    def __init__(self) -> None:
        self.flight_rt: list[float] = []  # pick_flight answer → pick_seat form
        self.seat_rt: list[float] = []  # pick_seat answer → review form
        self.first_form: list[float] = []  # user message → pick_flight form
        self.open_rt: list[float] = []  # GET / → socket open → conversation_state (visit)
        self.start_lag: list[float] = []  # client lateness against the schedule (visit)
        self.errors: list[str] = []
        self.frames: list[int] = []  # frames a browser received, socket open to booked
        self.completed = 0
        self.in_flight = 0
        self.peak_in_flight = 0


async def booking(chat: Chat, stats: Stats, delay: float, think: float, timeout: float) -> None:
    await asyncio.sleep(delay)
    stats.in_flight += 1
    stats.peak_in_flight = max(stats.peak_in_flight, stats.in_flight)
    try:
        t0 = time.perf_counter()
        await chat.send({"type": "user_message", "text": "Book a flight from JFK to LAX"})
        flights = await chat.next("elicit", timeout, key="pick_flight")
        stats.first_form.append(time.perf_counter() - t0)
        await asyncio.sleep(think * random.uniform(0.5, 1.5))
        t0 = time.perf_counter()
        await chat.answer(flights, flight_id=flights["context"]["flights"][0]["id"])
        seat = await chat.next("elicit", timeout, key="pick_seat")
        stats.flight_rt.append(time.perf_counter() - t0)
        await asyncio.sleep(think * random.uniform(0.5, 1.5))
        t0 = time.perf_counter()
        await chat.answer(seat, **free_seat(seat))
        review = await chat.next("elicit", timeout, key="review")
        stats.seat_rt.append(time.perf_counter() - t0)
        await chat.review_and_pay(timeout, review)  # the payment page: not timed
        done = await chat.next("tool_call", timeout, status="completed")
        assert done["result"]["booked"] is True, done
        await chat.next("conversation_state", timeout, phase="done")
        stats.completed += 1
    except Exception as exc:  # counted, not fatal
        stats.errors.append(f"{type(exc).__name__}: {exc}"[:200])
    finally:
        stats.in_flight -= 1


async def visit(
    http: Any, base: str, stats: Stats, start_at: float, think: float, timeout: float
) -> None:
    """A browser arriving at ``start_at`` (``time.perf_counter()``): GET / (its cookie and
    conversation), open the socket, then book (``booking``). Open loop: the arrival time is
    fixed in advance, however slow the server is; ``stats.start_lag`` says how late the client
    itself was."""
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    stats.start_lag.append(time.perf_counter() - start_at)
    chat = Chat(http, base)
    try:
        t0 = time.perf_counter()
        await chat.open()
        await chat.next("conversation_state", timeout)
        stats.open_rt.append(time.perf_counter() - t0)
    except Exception as exc:
        stats.errors.append(f"open: {type(exc).__name__}: {exc}"[:200])
        await chat.close()
        return
    try:
        await booking(chat, stats, 0.0, think, timeout)
        stats.frames.append(chat.frames)
    finally:
        await chat.close()


async def run(
    base: str, n: int, batch: int, spread: float, think: float, timeout: float, limit: float = 0
) -> dict:
    stats = Stats()
    chats: list[Chat] = []
    connect_errors: list[str] = []
    async with http_session() as http:
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            opened = await asyncio.gather(
                *(Chat(http, base).open() for _ in range(start, min(n, start + batch))),
                return_exceptions=True,
            )
            for c in opened:
                if isinstance(c, Chat):
                    chats.append(c)
                else:
                    connect_errors.append(f"{type(c).__name__}: {c}"[:200])
        ramp = time.perf_counter() - t0
        for chat in chats:  # the conversation_state each socket gets on connect
            await chat.next("conversation_state", timeout)
        t0 = time.perf_counter()
        flows = [
            asyncio.create_task(booking(c, stats, random.uniform(0, spread), think, timeout))
            for c in chats
        ]
        _, late = await asyncio.wait(flows, timeout=limit or None)
        for task in late:  # still running when the time limit hit: counted as errors
            task.cancel()
        if late:
            await asyncio.wait(late)
            stats.errors += [f"not finished within the {limit:.0f} s limit"] * len(late)
        flow = time.perf_counter() - t0
        await asyncio.gather(*(c.close() for c in chats), return_exceptions=True)
    return {
        "stats": stats,
        "connected": len(chats),
        "connect_errors": connect_errors,
        "ramp_s": ramp,
        "flow_s": flow,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", choices=("daphne", "uvicorn"), default="daphne")
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--spread", type=float, default=20.0)
    parser.add_argument("--think", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--limit", type=float, default=0, help="stop the flows after this many s")
    parser.add_argument(
        "--ladder",
        default="",
        help="then these sizes (e.g. 10,25,50,100), spread 10 s, until one fails",
    )
    args = parser.parse_args()
    limit = raise_nofile(65536)
    random.seed(1)
    site = BenchSite(plugin_settings=False)
    port = free_port()
    proc = site.start(args.server, port)
    try:
        rss0 = rss_kib(proc.pid)
        out = await run(
            f"http://127.0.0.1:{port}",
            args.chats, args.batch, args.spread, args.think, args.timeout, args.limit,
        )  # fmt: skip
        rss1 = rss_kib(proc.pid)
    finally:
        stop(proc)
    ladder_rows = []
    for size in [int(x) for x in args.ladder.split(",") if x.strip()]:
        port = free_port()
        proc = site.start(args.server, port)
        try:
            res = await run(
                f"http://127.0.0.1:{port}", size, args.batch, 10.0, args.think, 60.0, 60.0
            )
        finally:
            stop(proc)
        st: Stats = res["stats"]
        f, s2 = summary_ms(st.flight_rt), summary_ms(st.seat_rt)
        errs = len(res["connect_errors"]) + len(st.errors)
        ok = errs == 0 and f["p99"] <= 50  # the elicit round trip: answer → next form
        ladder_rows.append(
            [
                size,
                f"{size / 10:.1f}",
                st.completed,
                errs,
                f["p50"],
                f["p99"],
                s2["p50"],
                s2["p99"],
                "yes" if ok else "no",
            ]
        )
        if not ok:
            break
    stats: Stats = out["stats"]
    errors = len(out["connect_errors"]) + len(stats.errors)
    flight, seat, first = (
        summary_ms(s) for s in (stats.flight_rt, stats.seat_rt, stats.first_form)
    )
    rows: list[list[Any]] = [
        ["answer pick_flight → pick_seat form", flight["n"], flight["p50"], flight["p99"], flight["max"]],
        ["answer pick_seat → review form", seat["n"], seat["p50"], seat["p99"], seat["max"]],
        ["user message → pick_flight form", first["n"], first["p50"], first["p99"], first["max"]],
    ]  # fmt: skip
    rate = args.chats / args.spread if args.spread else float("inf")
    facts: list[list[Any]] = [
        ["chats (sockets) requested / connected", f"{args.chats} / {out['connected']}"],
        ["socket ramp (batches of %d), s" % args.batch, f"{out['ramp_s']:.1f}"],
        ["bookings started over, s / think time, s", f"{args.spread:.0f} / {args.think}"],
        ["flow time limit, s", f"{args.limit:.0f}" if args.limit else "none"],
        ["offered booking rate (per s)", f"{rate:.0f}"],
        ["peak bookings in flight at once", stats.peak_in_flight],
        ["bookings completed", stats.completed],
        ["errors (connect + flow)", f"{len(out['connect_errors'])} + {len(stats.errors)}"],
        ["flow wall time, s", f"{out['flow_s']:.1f}"],
        [f"{args.server} RSS with sockets open before / after, MiB", f"{rss0 / 1024:.0f} / {rss1 / 1024:.0f}"],
        ["client fd limit", limit],
    ]  # fmt: skip
    p99 = flight["p99"]  # the elicit round trip: answer → next form (seat → done has no form)
    body = [
        f"One {args.server} process (in-memory channel layer, SQLite, DJANGO_DEBUG=0), {args.chats} "
        "browsers with their own cookie and socket, all open before the flows start.",
        "",
        table(["fact", "value"], facts),
        "",
        table(["round trip", "n", "p50 ms", "p99 ms", "max ms"], [[r[0], int(r[1]), *r[2:]] for r in rows]),
        "",
        table(
            ["goal", "measured", "status"],
            [
                ["elicit round trip (flight → seat form) p99 ≤ 50 ms", f"{p99:.1f} ms", goal(p99 <= 50)],
                ["zero errors", str(errors), goal(errors == 0)],
            ],
        ),
    ]  # fmt: skip
    if ladder_rows:
        body += [
            "",
            f"Smaller loads on a fresh {args.server} each (starts spread over 10 s, same think time), "
            "until one misses p99 ≤ 50 ms (flight → seat form) or has errors:",
            "",
            table(
                ["chats", "bookings/s", "completed", "errors", "flight→seat p50", "p99",
                 "seat→done p50", "p99", "meets goals"],
                ladder_rows,
            ),
        ]  # fmt: skip
    sample = (out["connect_errors"] + stats.errors)[:5]
    if sample:
        body += ["", "First errors: " + "; ".join(f"`{e}`" for e in sample)]
    append_results(
        f"Load: {args.chats} concurrent booking chats on one {args.server}", "\n".join(body)
    )


if __name__ == "__main__":
    asyncio.run(main())
