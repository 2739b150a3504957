"""Servers forked from a zygote that has imported the server stack once.

A test server started as ``python -m uvicorn …`` costs about 1.9 s of CPU, half of it
importing libraries (the MCP SDK's types alone take the most), and a full run starts some 150
of them. The zygote is multiprocessing's fork server, one per pytest process, started on first
use with those libraries imported, and never Django's settings, the app, an event loop, a
reactor or anything else that reads the environment or opens a file descriptor when imported.
Each server is forked from it and then does what ``python -m <module>`` does. It takes its own
environment, working directory and output, then runs the module as ``__main__`` (``runpy``).
What it serves, its sockets, its signals and its exit are a server process's own.

Tests of how a process starts (the production commands, ``runserver``, the installed package)
exec theirs.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
from collections.abc import Sequence
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess

__all__ = ["Forked", "fork"]

# What the zygote imports: what a server imports that is slow and reads nothing of the
# environment when imported (measured with ``python -X importtime``).
PRELOAD = [
    "mcp_types",
    "mcp.server.lowlevel",
    "mcp.server.streamable_http_manager",
    "mcp.server.auth.provider",
    "pydantic",
    "httpx2",
    "starlette.applications",
    "uvicorn.main",
    "jsonschema",
    # Django's and Channels' framework modules: importing them reads no setting.
    "django.db.models",
    "django.forms",
    "django.template",
    "django.core.handlers.asgi",
    "django.views",
    "channels.routing",
    "channels.generic.websocket",
]


@functools.cache
def _zygote() -> ForkServerContext:
    """This process's fork server (started with the first server it forks)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _serve(module: str, args: list[str], env: dict[str, str], cwd: str, log: str | None) -> None:
    """In the forked child: become ``python -m module *args`` with ``env``, in ``cwd``,
    writing to ``log`` (nowhere when None)."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    out = os.open(log or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        atexit._run_exitfuncs()  # as an interpreter's exit would (multiprocessing skips them)


class Forked(subprocess.Popen[bytes]):
    """A server forked by the zygote, answering as the ``subprocess.Popen`` of the same
    command would (``pid``, ``poll``, ``wait``, signals, ``returncode``); its exit status comes
    from the fork server, which reaps it."""

    def __init__(self, args: Sequence[str], process: BaseProcess) -> None:  # no Popen.__init__
        self.args = list(args)
        self.stdin = self.stdout = self.stderr = None
        self.returncode: int | None = None
        self._child_created = False  # nothing for Popen's own clean-up to wait for
        self._process = process
        assert process.pid is not None
        self.pid = process.pid

    def _ended(self, code: int | None) -> int | None:
        if code is not None and self.returncode is None:
            self.returncode = code
            self._process.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        return self._ended(self._process.exitcode)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._process.join(timeout)
            if self._ended(self._process.exitcode) is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it exited just now
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork(command: Sequence[str], env: dict[str, str], cwd: str, log: str | None) -> Forked:
    """``python -m command[0] *command[1:]``, forked from the zygote."""
    module, *args = command
    process = _zygote().Process(
        target=_serve, args=(module, args, env, cwd, log), name=f"server:{module}", daemon=True
    )
    process.start()  # daemonic: ended with the pytest process if a test left it running
    return Forked([sys.executable, "-m", *command], process)
