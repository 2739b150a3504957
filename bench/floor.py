"""The litellm floor: CPU time of one streamed offline completion, and the booking rate it caps.

A booking makes three completions through litellm: the chat turn that calls book_flight, the
tool's ``ctx.sample`` (the travel tip) and the chat turn after the tool result. So one worker
(one core, one event loop) can never book faster than ``1 / (3 × CPU per completion)`` per
second however lean the rest of ChatBridge is: that is the floor the capacity goal is set
against. Measured in this process with ``time.process_time`` (all its threads, litellm's
included) around ``stream_completion`` — the function the chat turns use — with the offline
provider (``offline/chatbridge-1``), the tools the server offers and messages shaped like the
ones a booking sends: turn 1 (the user's request → the book_flight call) and turn 2 (the same
plus the call and its JSON result → the summary), alternating. The non-streamed sample
completion is timed too, for information.

    .venv/bin/python bench/floor.py [--completions 200] [--warmup 40]

``measure_floor(completions, warmup)`` returns the figures (``capacity.py`` calls it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import append_results, table  # noqa: E402

USER_TEXT = "Book a flight from JFK to LAX"
# The shape of book_flight's result (plugins/book_flight/tool.py), as the turn records it.
TOOL_RESULT = {
    "booked": True,
    "ticket": "TKT-7Q2M9X",
    "flight": "CB 1234",
    "airline": "ChatBridge Air",
    "route": "JFK-LAX",
    "departs": "2026-12-01T08:30:00",
    "seat": "12C",
    "price_usd": 249,
    "paid": {"last4": "4242"},
    "tip": "Arrive two hours before departure at LAX; security lines peak in the early morning.",
}


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbridge.settings")
    os.environ.setdefault("DJANGO_DEBUG", "0")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import django

    django.setup()


async def _measure(completions: int, warmup: int) -> dict[str, Any]:
    from django.conf import settings

    from chatbridge.engine.completion import Completion, stream_completion
    from chatbridge.installed_plugins import get_registry
    from chatbridge.llm import litellm_module

    model = settings.CHATBRIDGE_MODEL
    tools = [p.tool.function_spec() for p in get_registry()]

    async def one(messages: list[dict[str, Any]]) -> Completion:
        reply = Completion()
        async for _ in stream_completion(model, messages, tools, reply):
            pass
        return reply

    turn1 = [{"role": "user", "content": USER_TEXT}]
    first = await one(turn1)
    if [c.name for c in first.tool_calls] != ["book_flight"]:
        raise RuntimeError(f"the offline model did not call book_flight: {first}")
    turn2 = [
        *turn1,
        first.to_message(),
        {
            "role": "tool",
            "tool_call_id": first.tool_calls[0].id,
            "content": json.dumps(TOOL_RESULT, ensure_ascii=False),
        },
    ]
    summary = await one(turn2)
    if not summary.text or summary.tool_calls:
        raise RuntimeError(f"turn 2 is not a text reply: {summary}")
    shapes = (turn1, turn2)
    for i in range(warmup):
        await one(shapes[i % 2])
    cpu: list[float] = []
    wall: list[float] = []
    for i in range(completions):
        w0, c0 = time.perf_counter(), time.process_time()
        await one(shapes[i % 2])
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)

    # The tool's ctx.sample: litellm.acompletion without streaming or tools (for information).
    litellm = litellm_module()
    prompt = [{"role": "user", "content": "One short travel tip for LAX airport."}]
    for _ in range(min(warmup, 20)):
        await litellm.acompletion(model=model, messages=prompt, max_tokens=60)
    sample_cpu: list[float] = []
    for _ in range(max(10, completions // 4)):
        c0 = time.process_time()
        await litellm.acompletion(model=model, messages=prompt, max_tokens=60)
        sample_cpu.append(time.process_time() - c0)

    per = statistics.fmean(cpu)
    return {
        "model": model,
        "completions": completions,
        "warmup": warmup,
        "cpu_per_completion_s": per,
        "cpu_p50_s": statistics.median(cpu),
        "wall_per_completion_s": statistics.fmean(wall),
        "sample_cpu_s": statistics.fmean(sample_cpu),
        "floor_per_s": 1 / (3 * per),
    }


def measure_floor(completions: int = 200, warmup: int = 40) -> dict[str, Any]:
    """Warm litellm up, then time ``completions`` streamed offline completions (CPU, this
    process). ``floor_per_s`` = 1 / (3 × mean CPU per completion), bookings per second."""
    _setup_django()
    return asyncio.run(_measure(completions, warmup))


def floor_rows(res: dict[str, Any]) -> list[list[Any]]:
    return [
        ["model", res["model"]],
        ["streamed completions timed (after warm-up)", f"{res['completions']} ({res['warmup']})"],
        ["CPU per streamed completion, mean / p50, ms",
         f"{res['cpu_per_completion_s'] * 1000:.2f} / {res['cpu_p50_s'] * 1000:.2f}"],
        ["wall per streamed completion, ms", f"{res['wall_per_completion_s'] * 1000:.2f}"],
        ["CPU per ctx.sample completion (not streamed), ms", f"{res['sample_cpu_s'] * 1000:.2f}"],
        ["floor = 1 / (3 × CPU per completion), bookings/s", f"{res['floor_per_s']:.1f}"],
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--completions", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=40)
    args = parser.parse_args()
    res = measure_floor(args.completions, args.warmup)
    body = [
        "One process, no server: `stream_completion` (what a chat turn calls) with the offline "
        "provider, the served tools, turn 1 (request → book_flight call) and turn 2 (tool "
        "result → summary) alternating; CPU by `time.process_time`. A booking makes 3 "
        "completions (2 turns + the tool's `ctx.sample`), hence the floor.",
        "",
        table(["fact", "value"], floor_rows(res)),
    ]
    append_results("litellm floor: CPU per offline completion", "\n".join(body))


if __name__ == "__main__":
    main()
