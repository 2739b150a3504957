"""Run every benchmark in turn (each appends its section to bench/RESULTS.md).

    .venv/bin/python bench/run_all.py [--quick] [--skip load,diagnose]

About 6 minutes on 2 cores; ``--quick`` runs smaller sizes (a smoke test, ~1.5 minutes).
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
    "memory": ["--sessions", "10000"],
    "replay": ["--iterations", "500"],
    "load": [
        "--chats",
        "1000",
        "--spread",
        "30",
        "--think",
        "0.5",
        "--timeout",
        "60",
        "--limit",
        "75",
        "--ladder",
        "2,5,10,20,40",
    ],
    "diagnose": ["--iterations", "100", "--bookings", "10"],
}
QUICK = {
    "elicit_roundtrip": ["--iterations", "60", "--warmup", "10", "--bookings", "10"],
    "memory": ["--sessions", "2000"],
    "replay": ["--iterations", "100"],
    "load": [
        "--chats",
        "100",
        "--spread",
        "10",
        "--think",
        "0.5",
        "--timeout",
        "60",
        "--ladder",
        "10",
    ],
    "diagnose": ["--iterations", "40", "--bookings", "5"],
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip", default="", help="comma-separated script names to skip")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
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
