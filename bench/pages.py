"""Page and static-file requests: requests per second and server CPU per request, for one or
more checkouts measured in the same run (e.g. ``main`` against a branch).

Each checkout is served by its own venv (``CHECKOUT/.venv/bin/python``) with uvicorn (or
daphne), the project's production settings (``chatbridge.settings``, DJANGO_DEBUG=0, collected
static files) on a freshly migrated temporary SQLite file. Rounds alternate between the
checkouts, each on a fresh server and database, so drift of the machine falls on both. A round:

- ``new visitor``: ``GET /`` without a cookie (a browser session and a conversation are
  created: two writes), ``--visitors`` of them, ``--concurrency`` at a time;
- ``chat page``: ``GET /c/<id>/`` with that visitor's cookie (reads, the page rendered);
- ``static``: ``GET`` of the page's hashed stylesheet with ``Accept-Encoding: gzip``;
- ``burst``: ``--burst`` new browsers at once, each ``GET /`` then its chat page (what a
  burst of page loads costs when every request's session write meets the others').

Server CPU = utime + stime of the server process over the phase (``/proc/PID/stat``) divided
by the requests; the client (aiohttp) runs in this process on the same machine.

    .venv/bin/python bench/pages.py --checkout main=/work/main-copy --checkout branch=.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import append_results, fmt, free_port, pct, stop, table, wait_for_port

PHASES = ("new visitor", "chat page", "static", "burst")


@dataclass
class Phase:
    requests: int
    wall_s: float
    cpu_s: float
    latencies_s: list[float]

    @property
    def per_second(self) -> float:
        return self.requests / self.wall_s

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu_s / self.requests


def server_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """One checkout served on a fresh database."""

    def __init__(self, checkout: Path, server: str, extra_env: dict[str, str]) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="chatbridge-pages-"))
        python = str(checkout / ".venv" / "bin" / "python")
        env = {
            **os.environ,
            "DATABASE_URL": f"sqlite:///{self.tmp}/bench.sqlite3",
            "DJANGO_SETTINGS_MODULE": "chatbridge.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(32),
            "DJANGO_STATIC_ROOT": str(self.tmp / "static"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": str(checkout),
            **extra_env,
        }
        env.pop("REDIS_URL", None)
        for command in ("migrate", "collectstatic"):
            subprocess.run(
                [python, "manage.py", command, "--noinput", "-v", "0"],
                cwd=checkout,
                env=env,
                check=True,
            )
        self.port = free_port()
        if server == "uvicorn":
            cmd = [
                python, "-m", "uvicorn", "chatbridge.asgi:application", "--host", "127.0.0.1",
                "--port", str(self.port), "--lifespan", "on", "--ws", "websockets",
                "--log-level", "warning", "--no-access-log",
            ]  # fmt: skip
        else:
            cmd = [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port)]
            cmd.append("chatbridge.asgi:application")
        log = (self.tmp / "server.log").open("wb")
        self.proc = subprocess.Popen(
            cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        wait_for_port(self.port, self.proc)
        self.base = f"http://127.0.0.1:{self.port}"
        self.settle()

    def settle(self, timeout: float = 60) -> None:
        """Wait until the server idles: it imports litellm in a thread after start-up, which
        takes seconds of CPU that no request should be charged."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = server_cpu_s(self.proc.pid)
            time.sleep(0.5)
            if server_cpu_s(self.proc.pid) - before < 0.02:
                return
        raise RuntimeError(f"server {self.proc.pid} still busy after {timeout} s")


async def timed(
    server: Server, count: int, concurrency: int, one: Callable[[int], Awaitable[int]]
) -> Phase:
    """``count`` calls of ``one`` (each returns how many requests it made), ``concurrency`` at
    a time."""
    latencies: list[float] = []
    requests = 0
    queue = iter(range(count))

    async def worker() -> None:
        nonlocal requests
        for i in queue:
            start = time.perf_counter()
            made = await one(i)  # not `requests += await ...`: that reads the count first
            requests += made
            latencies.append(time.perf_counter() - start)

    cpu0, wall0 = server_cpu_s(server.proc.pid), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - wall0, server_cpu_s(server.proc.pid) - cpu0
    return Phase(requests, wall, cpu, latencies)


async def one_round(
    server: Server, visitors: int, concurrency: int, burst: int
) -> dict[str, Phase]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar()
    ) as http:
        base = server.base
        visited: list[tuple[str, str]] = []

        async def new_visitor(_: int) -> int:
            async with http.get(f"{base}/", allow_redirects=False) as response:
                assert response.status == 302, response.status
                visited.append((response.cookies["sessionid"].value, response.headers["Location"]))
            return 1

        async def chat_page(i: int) -> int:
            cookie, location = visited[i]
            async with http.get(base + location, headers={"Cookie": f"sessionid={cookie}"}) as r:
                assert r.status == 200, r.status
                await r.read()
            return 1

        # Warm up (templates, URL resolver, first connections); not counted.
        for i in range(20):
            await new_visitor(i)
            await chat_page(i)
        cookie, location = visited[0]
        async with http.get(base + location, headers={"Cookie": f"sessionid={cookie}"}) as r:
            page = await r.text()
        stylesheet = next(re.finditer(r'href="(/static/[^"]+\.css)"', page)).group(1)
        visited.clear()

        async def static(_: int) -> int:
            async with http.get(base + stylesheet, headers={"Accept-Encoding": "gzip"}) as r:
                assert r.status == 200, r.status
                await r.read()
            return 1

        async def page_load(i: int) -> int:
            await new_visitor(i)
            await chat_page(len(visited) - 1)
            return 2

        phases = {"new visitor": await timed(server, visitors, concurrency, new_visitor)}
        phases["chat page"] = await timed(server, visitors, concurrency, chat_page)
        phases["static"] = await timed(server, visitors, concurrency, static)
        visited.clear()
        phases["burst"] = await timed(server, burst, burst, page_load)
        return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--checkout", action="append", required=True, help="NAME=PATH[,VAR=VALUE...]: env too"
    )
    parser.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--visitors", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--no-record", action="store_true", help="print, do not append")
    args = parser.parse_args()
    checkouts: list[tuple[str, Path, dict[str, str]]] = []
    for option in args.checkout:
        name, rest = option.split("=", 1)
        path, *assignments = rest.split(",")
        env = dict(a.split("=", 1) for a in assignments)
        checkouts.append((name, Path(path).resolve(), env))
    runs: dict[str, list[dict[str, Phase]]] = {name: [] for name, _, _ in checkouts}
    for _ in range(args.rounds):
        for name, path, env in checkouts:
            server = Server(path, args.server, env)
            try:
                phases = asyncio.run(one_round(server, args.visitors, args.concurrency, args.burst))
            finally:
                stop(server.proc)
            runs[name].append(phases)
            summary = ", ".join(f"{k} {fmt(v.per_second)}/s" for k, v in phases.items())
            print(f"{name}: {summary}", flush=True)

    def median(name: str, phase: str, value: Callable[[Phase], float]) -> float:
        return statistics.median(value(r[phase]) for r in runs[name])

    rows: list[list[Any]] = []
    for phase in PHASES:
        for name, _, _ in checkouts:
            rows.append(
                [
                    phase,
                    name,
                    median(name, phase, lambda p: p.per_second),
                    median(name, phase, lambda p: p.cpu_ms),
                    median(name, phase, lambda p: 1000 * pct(p.latencies_s, 0.5)),
                    median(name, phase, lambda p: 1000 * pct(p.latencies_s, 0.99)),
                    median(name, phase, lambda p: p.wall_s),
                ]
            )
    headers = ["phase", "checkout", "req/s", "server CPU ms/req", "p50 ms", "p99 ms", "wall s"]
    described = ", ".join(
        f"{name} = {path}" + "".join(f" {k}={v}" for k, v in env.items())
        for name, path, env in checkouts
    )
    body = (
        f"{args.server}, SQLite, DJANGO_DEBUG=0; {args.rounds} rounds alternating between the "
        f"checkouts ({described}), each on a fresh server and database; {args.visitors} "
        f"requests a phase, {args.concurrency} at a time; the burst: {args.burst} browsers at "
        "once, each `GET /` and its chat page (a burst latency is the pair's). Medians over "
        "the rounds.\n\n" + table(headers, rows)
    )
    if args.no_record:
        print(body)
    else:
        append_results("Page requests (bench/pages.py)", body)


if __name__ == "__main__":
    main()
