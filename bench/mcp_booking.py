"""Over MCP: a booking through ChatBridge (legacy push, durable session) against the bare SDK.

Both servers run under uvicorn on loopback and are called with the official ``mcp`` client in
legacy mode, one session, one call after another, an elicitation callback answering each
question from its context (the first flight, the first free seat). Timed: the whole
``tools/call``. Compared (goal: ChatBridge ≤ 1.5× the SDK, p50):

- ChatBridge ``book_two`` (``bench/mcp_booking_plugin.py``): book_flight's flight and seat
  questions as book_flight asks them; each call is a durable session (its row, its journal
  written before the tool goes on, the question on record before it is shown), on SQLite;
- the SDK's ``book_two`` (``bench/mcp_sdk_booking_server.py``): the same questions, checks and
  notes on an ``MCPServer`` that keeps nothing.

For information, the whole book_flight through ChatBridge: the two questions, the review, the
payment page (paid over HTTP by the callback, as a person's browser would), the sampled tip
and the ticket.

    .venv/bin/python bench/mcp_booking.py [--calls 100] [--warmup 10] [--full 20]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    BENCH,
    PY,
    ROOT,
    BenchSite,
    append_results,
    free_port,
    goal,
    pct,
    stop,
    summary_ms,
    table,
    wait_for_port,
)

GOAL_RATIO = 1.5
ROUTE = {"origin": "JFK", "destination": "LAX"}


class Person:
    """Answers like the tests' person: first flight, first free seat, confirm, pay."""

    def __init__(self) -> None:
        self.questions = 0
        self.stamps: list[float] = []  # each question's arrival and its answer's departure

    async def __call__(self, context: Any, params: Any) -> Any:
        self.stamps.append(time.perf_counter())
        try:
            return await self._answer(params)
        finally:
            self.stamps.append(time.perf_counter())

    async def _answer(self, params: Any) -> Any:
        import mcp_types as types

        from chatbridge.author.model_context import extract_context
        from plugins.book_flight.data import SeatMap

        self.questions += 1
        if params.mode == "url":  # book_flight's payment: pay on the page, then consent
            from tests.pages import pay

            await pay(params.url)
            return types.ElicitResult(action="accept")
        found = extract_context(params.requested_schema, params.message)
        if "price_usd" in found:
            return types.ElicitResult(action="accept", content={"confirm": True})
        if "flights" in found:
            return types.ElicitResult(
                action="accept", content={"flight_id": found["flights"][0]["id"]}
            )
        label = SeatMap.model_validate(found["seat_map"]).first_free()
        assert label is not None
        return types.ElicitResult(
            action="accept", content={"row": int(label[:-1]), "seat": label[-1]}
        )


# The legs of a book_two call, as its client sees them.
LEGS = ["call → flight question", "flight answer → seat question", "seat answer → result"]


async def calls(
    url: str, tool: str, warmup: int, count: int, legs: dict[str, list[float]] | None = None
) -> tuple[list[float], int]:
    """Seconds per ``tools/call`` of ``tool`` (after ``warmup`` untimed ones); questions asked.
    ``legs``: the seconds of each of ``LEGS`` per timed call (a call of two questions)."""
    from mcp import Client

    person = Person()
    samples = []
    async with Client(url, mode="legacy", elicitation_callback=person) as client:
        for n in range(warmup + count):
            person.stamps.clear()
            t0 = time.perf_counter()
            result = await client.call_tool(tool, ROUTE)
            end = time.perf_counter()
            assert not result.is_error, result.content
            assert result.structured_content and result.structured_content["booked"], result
            if n >= warmup:
                samples.append(end - t0)
                if legs is not None and len(person.stamps) == 4:
                    marks = [t0, *person.stamps, end]
                    for i, leg in enumerate(LEGS):
                        legs.setdefault(leg, []).append(marks[2 * i + 1] - marks[2 * i])
    return samples, person.questions


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--full", type=int, default=20, help="whole book_flight calls (info)")
    args = parser.parse_args()
    site = BenchSite()
    results: dict[str, dict[str, float]] = {}
    asked: dict[str, int] = {}
    legs: dict[str, dict[str, list[float]]] = {"ChatBridge": {}, "SDK": {}}

    port = free_port()
    proc = site.start("uvicorn", port)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        name = "ChatBridge book_two (durable session, SQLite)"
        samples, asked[name] = await calls(
            url, "book_two", args.warmup, args.calls, legs["ChatBridge"]
        )
        results[name] = summary_ms(samples)
        name = "ChatBridge book_flight, whole (review, payment page, tip, ticket)"
        samples, asked[name] = await calls(url, "book_flight", 2, args.full)
        results[name] = summary_ms(samples)
    finally:
        stop(proc)

    port = free_port()
    log = site.log("mcp-sdk-booking").open("wb")
    sdk = subprocess.Popen(
        [PY, str(BENCH / "mcp_sdk_booking_server.py"), str(port)],
        cwd=ROOT, env=site.env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for_port(port, sdk)
        name = "MCP SDK MCPServer book_two (nothing kept)"
        samples, asked[name] = await calls(
            f"http://127.0.0.1:{port}/mcp", "book_two", args.warmup, args.calls, legs["SDK"]
        )
        results[name] = summary_ms(samples)
    finally:
        stop(sdk)

    rows = [
        [name, int(r["n"]), asked[name], r["p50"], r["p99"], r["mean"]]
        for name, r in results.items()
    ]
    ours = results["ChatBridge book_two (durable session, SQLite)"]["p50"]
    bare = results["MCP SDK MCPServer book_two (nothing kept)"]["p50"]
    leg_ms = {who: {leg: pct(legs[who].get(leg, []), 0.5) * 1000 for leg in LEGS} for who in legs}
    leg_rows = [
        [leg, leg_ms["ChatBridge"][leg], leg_ms["SDK"][leg],
         f"{leg_ms['ChatBridge'][leg] - leg_ms['SDK'][leg]:+.2f}"]
        for leg in LEGS
    ]  # fmt: skip
    why = "; ".join(f"{row[0]} {row[3]} ms" for row in leg_rows) + (
        " against the SDK: each leg waits for ChatBridge's writes (the call's row and first "
        "question on record; the answer, then the next question; the answer, then the call's end)"
    )
    met = ours <= GOAL_RATIO * bare
    body = [
        f'One `mcp.Client(mode="legacy")` session per server, {args.calls} calls after '
        f"{args.warmup} warm-up (whole book_flight: {args.full} after 2); the elicitation "
        "callback answers at once. Both servers under uvicorn on loopback; ChatBridge with "
        "DJANGO_DEBUG=0 on SQLite.",
        "",
        table(["call", "n", "questions", "p50 ms", "p99 ms", "mean ms"], rows),
        "",
        "The legs of a book_two call as its client sees them (p50 ms; a question's leg ends when "
        "the client's callback is called, an answer's starts when it returns):",
        "",
        table(["leg", "ChatBridge", "SDK", "difference"], leg_rows),
        "",
        table(
            ["goal", "measured", "status", "where the time went (missed)"],
            [
                [
                    f"book_flight's two questions over MCP ≤ {GOAL_RATIO}× the bare SDK (p50)",
                    f"{ours / bare:.2f}×",
                    goal(met),
                    "" if met else why,
                ]
            ],
        ),  # fmt: skip
    ]
    append_results("MCP booking: ChatBridge against the bare SDK", "\n".join(body))


if __name__ == "__main__":
    asyncio.run(main())
