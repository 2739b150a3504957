"""Starting real servers for tests: free ports and waiting for them to listen."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Return once ``port`` accepts connections; fail if ``proc`` dies or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"server on port {port} did not start (exit code {proc.poll()})")
            time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server, and kill it if it does not exit promptly (open WebSockets)."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def start_daphne(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """daphne serving the project on ``port``, listening on return. Its output goes to
    ``$CHATBRIDGE_TEST_LOGS/daphne-<port>.log`` when that is set, else nowhere."""
    logs = os.environ.get("CHATBRIDGE_TEST_LOGS")
    out = open(f"{logs}/daphne-{port}.log", "wb") if logs else subprocess.DEVNULL  # noqa: SIM115
    command = ["daphne", "-b", "127.0.0.1", "-p", str(port), "chatbridge.asgi:application"]
    proc = subprocess.Popen(
        [sys.executable, "-m", *command], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
    )
    wait_for_port(port, proc)
    return proc


def start_logged(
    command: list[str], port: int, env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """``command`` (a server listening on ``port``) with its output in ``log``; listening on
    return."""
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    wait_for_port(port, proc)
    return proc
