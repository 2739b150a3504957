"""Profile a ChatBridge server during a workload (not part of run_all).

Serves ``bench.profiled_asgi:application`` (cProfile on the event loop + every sync_to_async
call timed), drives ``loop_ask`` round trips or bookings, stops the server and prints the
profile (also left in /tmp/chatbridge-profile-<server>.{prof,txt}).

    .venv/bin/python bench/profile_server.py [--server daphne|uvicorn] [--workload loop|booking]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import PY, ROOT, BenchSite, free_port, wait_for_port  # noqa: E402
from bench.elicit_roundtrip import loop_ask, seat_step  # noqa: E402


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="daphne", choices=["daphne", "uvicorn"])
    parser.add_argument("--workload", default="loop", choices=["loop", "booking", "load"])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--variant", default="", help="BENCH_VARIANT, see bench/variant_asgi.py")
    args = parser.parse_args()
    site = BenchSite()
    out = f"/tmp/chatbridge-profile-{args.server}-{args.workload}"
    env = {**site.env, "BENCH_PROFILE_OUT": out, "BENCH_VARIANT": args.variant}
    port = free_port()
    app = "bench.profiled_asgi:application"
    if args.server == "daphne":
        cmd = [PY, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), app]
    else:
        cmd = [PY, "-m", "uvicorn", app, "--port", str(port), "--lifespan", "on",
               "--ws", "websockets", "--log-level", "warning", "--no-access-log"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=site.log("profiled").open("wb"),
                            stderr=subprocess.STDOUT)  # fmt: skip
    wait_for_port(port, proc)
    base = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    if args.workload == "loop":
        samples, _, _ = await loop_ask(base, 0, args.iterations)
    elif args.workload == "booking":
        samples, _ = await seat_step(base, 0, args.iterations)
    else:  # --iterations chats of bench/load.py, starts spread over 10 s
        from bench.load import run

        result = await run(base, args.iterations, 50, 10.0, 0.5, 120.0)
        samples = result["stats"].flight_rt or [0.0]
    wall = time.perf_counter() - t0
    print(
        f"{len(samples)} samples, mean {sum(samples) / len(samples) * 1000:.2f} ms; wall {wall:.1f} s"
    )
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    if os.path.exists(out + ".txt"):
        print(Path(out + ".txt").read_text())
    else:
        print("no profile written; server log:", site.log("profiled").read_text()[-2000:])


if __name__ == "__main__":
    asyncio.run(main())
