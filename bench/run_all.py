"""Run every benchmark in turn (each appends its section to bench/RESULTS.md).

    .venv/bin/python bench/run_all.py [--quick] [--skip capacity] [--with load,diagnose]

The full run measures every goal of issue 16 (about 5 minutes on 2 cores); ``--quick`` runs
smaller sizes of the same scripts in under two minutes (a smoke test: its figures are noisy).
``load`` (1,000 open chats on one worker) and ``diagnose`` (what a round trip costs, one part
removed at a time) are for investigation and run only when asked for with ``--with``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

FULL = {
    "elicit_roundtrip": ["--iterations", "300", "--warmup", "50", "--bookings", "60"],
    "mcp_booking": ["--calls", "100", "--warmup", "10", "--full", "20"],
    "memory": ["--sessions", "10000"],
    "memory_bookings": ["--bookings", "1000", "--warmup", "50", "--wave", "50"],
    "replay": ["--iterations", "500"],
    "capacity": ["--ladder", "2,5,10,15,20,30,40,60,80", "--seconds", "15"],
    "cluster": ["--bookings", "20"],
}
QUICK = {
    "elicit_roundtrip": ["--iterations", "60", "--warmup", "10", "--bookings", "10"],
    "mcp_booking": ["--calls", "20", "--warmup", "3", "--full", "3"],
    "memory": ["--sessions", "1000"],
    "memory_bookings": ["--bookings", "100", "--warmup", "20", "--wave", "50"],
    "replay": ["--iterations", "100"],
    "capacity": [
        "--ladder", "5,10", "--seconds", "4", "--completions", "40", "--warmup", "10",
        "--pg-ladder", "5", "--pg-seconds", "4", "--no-bisect", "--grace", "15",
    ],
    "cluster": ["--bookings", "3"],
}  # fmt: skip
OPTIONAL = {
    "load": ["--server", "uvicorn", "--chats", "1000", "--spread", "30", "--think", "0.5",
             "--timeout", "60", "--limit", "75", "--ladder", ""],
    "diagnose": ["--iterations", "100", "--bookings", "10"],
}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip", default="", help="comma-separated script names to skip")
    parser.add_argument("--with", dest="extra", default="", help="also run: load, diagnose")
    args = parser.parse_args()
    plan = dict(QUICK if args.quick else FULL)
    for name in (n.strip() for n in args.extra.split(",") if n.strip()):
        plan[name] = OPTIONAL[name]
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    failed = []
    started = time.perf_counter()
    for name, extra in plan.items():
        if name in skip:
            continue
        print(f"\n=== {name} {' '.join(extra)}", flush=True)
        t0 = time.perf_counter()
        code = subprocess.call([sys.executable, str(BENCH / f"{name}.py"), *extra], cwd=ROOT)
        print(f"=== {name}: exit {code} in {time.perf_counter() - t0:.0f} s", flush=True)
        if code:
            failed.append(name)
    print(f"\nall done in {time.perf_counter() - started:.0f} s; failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
