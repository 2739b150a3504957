"""Shared helpers for the benchmark scripts: servers, chat client, statistics, RESULTS.md."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import resource
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "RESULTS.md"
PY = sys.executable
PACKAGES = (
    "Django",
    "channels",
    "channels_redis",
    "daphne",
    "Twisted",
    "uvicorn",
    "websockets",
    "aiohttp",
    "mcp",
    "pydantic",
    "redis",
)

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# -- machine and results ----------------------------------------------------------------------


def machine() -> str:
    versions = []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} (missing)")
    return (
        f"nproc {os.cpu_count()}, {platform.machine()}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; " + ", ".join(versions)
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (also readable on a terminal)."""
    cells = [[str(h) for h in headers], *[[fmt(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join(lines)


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if value >= 100:
            return f"{value:.0f}"
        if value >= 10:
            return f"{value:.1f}"
        return f"{value:.3f}" if value < 1 else f"{value:.2f}"
    return str(value)


def goal(met: bool) -> str:
    return "**met**" if met else "**MISSED**"


def append_results(title: str, body: str) -> None:
    """Append a dated section to bench/RESULTS.md and print it."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = f"\n## {title} ({stamp})\n\nMachine: {machine()}\n\n{body.strip()}\n"
    print(section)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# ChatBridge benchmark results\n\nEach run of a bench script appends a section. "
            "Ratios compare figures measured in the same run.\n"
        )
    with RESULTS.open("a") as out:
        out.write(section)


def pct(samples: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of ``samples`` (nearest rank), in the samples' unit."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))
    return ordered[rank]


def summary_ms(samples_s: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {
        "n": len(ms),
        "p50": pct(ms, 0.50),
        "p99": pct(ms, 0.99),
        "mean": statistics.fmean(ms) if ms else float("nan"),
        "max": max(ms) if ms else float("nan"),
    }


# -- processes --------------------------------------------------------------------------------


def raise_nofile(wanted: int = 65536) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_kib(pid: int | None = None) -> int:
    """Resident set size (VmRSS) in KiB, from /proc."""
    with open(f"/proc/{pid or os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server on port {port} did not start (exit {proc.poll()})")
            time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=8)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


class BenchSite:
    """A migrated temporary SQLite database and the environment to serve the project on it."""

    def __init__(
        self, *, plugin_settings: bool = True, db_dir: str | None = None, db_url: str | None = None
    ) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="chatbridge-bench-"))
        db = (
            Path(tempfile.mkdtemp(prefix="chatbridge-bench-db-", dir=db_dir))
            if db_dir
            else self.tmp
        )
        self.env = {
            **os.environ,
            "DATABASE_URL": db_url or f"sqlite:///{db}/bench.sqlite3",
            "DJANGO_SETTINGS_MODULE": "bench.settings_bench"
            if plugin_settings
            else "chatbridge.settings",
            # The production settings: no DEBUG query log, collected static files.
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(32),
            "DJANGO_STATIC_ROOT": str(self.tmp / "static"),
            # The MCP benchmarks call /mcp on loopback.
            "CHATBRIDGE_MCP_PUBLIC": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": str(ROOT),
            # The per-socket command rate limit (10/s, burst 30) would refuse a benchmark's
            # back-to-back answers; lift it so latency, not the limiter, is measured.
            "CHATBRIDGE_WS_RATE": "1000000",
            "CHATBRIDGE_WS_BURST": "1000000",
            # Every load client comes from 127.0.0.1: the caps per client address would count
            # a whole benchmark's browsers as one household.
            "CHATBRIDGE_SOCKETS_PER_ADDRESS": "none",
            "CHATBRIDGE_RUNNING_TURNS_PER_ADDRESS": "none",
            "CHATBRIDGE_QUEUE_PER_ADDRESS": "none",
            "CHATBRIDGE_WS_RATE_PER_ADDRESS": "1000000",
            "CHATBRIDGE_WS_BURST_PER_ADDRESS": "1000000",
        }
        self.env.pop("REDIS_URL", None)  # one worker: the in-memory channel layer
        for command in ("migrate", "collectstatic"):
            subprocess.run(
                [PY, "manage.py", command, "--noinput", "-v", "0"],
                cwd=ROOT,
                env=self.env,
                check=True,
            )

    def log(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def start(
        self,
        server: str,
        port: int,
        app: str = "chatbridge.asgi:application",
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        if server == "daphne":
            cmd = [PY, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), app]
        elif server == "uvicorn":
            cmd = [
                PY, "-m", "uvicorn", app, "--host", "127.0.0.1",
                "--port", str(port), "--lifespan", "on", "--ws", "websockets",
                "--log-level", "warning", "--no-access-log",
            ]  # fmt: skip
        else:
            raise ValueError(server)
        log = self.log(f"{server}-{port}")
        out = log.open("wb")
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env={**self.env, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=lambda: raise_nofile(65536),
        )  # fmt: skip
        wait_for_port(port, proc)
        if app == "chatbridge.asgi:application":
            wait_until_warm(log, proc)
        return proc


def wait_until_warm(log: Path, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    """Wait until the worker has imported litellm in the background (``serving.WARM`` in its
    log): the seconds of that import are a start-up cost, not what a benchmark measures (its
    requests then waited behind the import: a p99 of 200 ms over MCP)."""
    from chatbridge.serving import WARM

    deadline = time.monotonic() + timeout
    while WARM not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not get warm: see {log}")
        time.sleep(0.1)


# -- a JSON-protocol chat client --------------------------------------------------------------


def milestones(seen: list[tuple[str, float]], t0: float, kinds: list[str]) -> dict[str, float]:
    """Seconds from ``t0`` to the first event of each kind in ``kinds`` received after it
    (``seen``: ``Chat.seen``); a kind not received is left out."""
    found: dict[str, float] = {}
    for kind, at in seen:
        if at >= t0 and kind in kinds and kind not in found:
            found[kind] = at - t0
    return found


class Chat:
    """A browser session with one conversation and its JSON-protocol socket (aiohttp)."""

    def __init__(self, http: Any, base: str) -> None:
        self.http, self.base = http, base
        self.cookie = self.conversation_id = ""
        self.socket: Any = None
        self.last_size = 0
        self.frames = 0  # frames received (a socket that is behind gets them coalesced)
        self.seen: list[tuple[str, float]] | None = None  # (event type, arrival), when kept

    async def open(self) -> Chat:
        async with self.http.get(f"{self.base}/", allow_redirects=False) as response:
            self.cookie = response.cookies["sessionid"].value
            self.conversation_id = response.headers["Location"].strip("/").split("/")[-1]
        ws = self.base.replace("http://", "ws://")
        self.socket = await self.http.ws_connect(
            f"{ws}/ws/chat/{self.conversation_id}/?format=json",
            headers={"Origin": self.base, "Cookie": f"sessionid={self.cookie}"},
            max_msg_size=0,
            autoping=True,
            heartbeat=None,
        )
        return self

    async def send(self, command: dict[str, Any]) -> None:
        await self.socket.send_str(json.dumps(command))

    async def next(self, kind: str, timeout: float = 30.0, **match: Any) -> dict[str, Any]:
        import aiohttp

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"no {kind} {match}")
            message = await self.socket.receive(timeout=remaining)
            if message.type != aiohttp.WSMsgType.TEXT:
                raise ConnectionError(f"socket: {message.type} {message.data!r}")
            self.frames += 1
            event = json.loads(message.data)
            if self.seen is not None:
                self.seen.append((event.get("type", ""), time.perf_counter()))
            if event.get("type") == "error":
                raise RuntimeError(f"server error event: {event}")
            if event["type"] == kind and all(event.get(k) == v for k, v in match.items()):
                self.last_size = len(message.data)
                return event

    async def answer(self, form: dict[str, Any], **content: Any) -> None:
        await self.send(
            {
                "type": "elicit_response",
                "session_id": form["session_id"],
                "call_id": form["call_id"],
                "elicit_id": form["elicit_id"],
                "action": "accept",
                "content": content,
            }
        )

    async def review_and_pay(
        self, timeout: float = 30.0, review: dict[str, Any] | None = None
    ) -> None:
        """book_flight after the seat: confirm the review (``review``, when already received),
        then pay on the page behind the payment question's link, as its browser tab would."""
        from tests.chat_http import pay_over_http

        if review is None:
            review = await self.next("elicit", timeout, key="review")
        await self.answer(review, confirm=True)
        payment = await self.next("elicit", timeout, key="payment")
        await pay_over_http(self.http, payment["url"])

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close()


def http_session(limit: int = 0) -> Any:
    """An aiohttp session that keeps no cookies (each GET / is a new browser)."""
    import aiohttp

    return aiohttp.ClientSession(
        cookie_jar=aiohttp.DummyCookieJar(),
        connector=aiohttp.TCPConnector(limit=limit, force_close=False),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
    )


def free_seat(seat_event: dict[str, Any]) -> dict[str, Any]:
    """A free seat from a ``pick_seat`` form's context."""
    from plugins.book_flight.data import SeatMap

    seat_map = SeatMap.model_validate(seat_event["context"]["seat_map"])
    label = seat_map.first_free()
    assert label is not None
    return {"row": int(label[:-1]), "seat": label[-1]}
