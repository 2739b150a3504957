"""Starting the app the way docs/production.md says, for tests of production."""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.servers import ROOT, free_port, start_module

README = ROOT / "docs" / "production.md"
MARKER = "<!-- production commands: tests/test_deployment.py runs exactly these lines -->"


def readme_commands() -> list[list[str]]:
    """The ``.venv/bin/python …`` lines of docs/production.md's block, as argument lists."""
    text = README.read_text()
    assert MARKER in text, "docs/production.md lost its production commands block"
    block = text.split(MARKER, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.startswith(".venv/bin/python ")]


def production_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a production process: nothing from debug or the test defaults."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "CHATBRIDGE_", "DATABASE_", "REDIS_"))
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "chatbridge.settings",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(48),
            "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
            "DJANGO_STATIC_ROOT": str(tmp / "static"),
            **extra,
        }
    )
    return env


@dataclass
class Production:
    """A server started by the README's commands."""

    url: str
    log: Path
    proc: subprocess.Popen[bytes]
    env: dict[str, str]

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_production(tmp: Path, env: dict[str, str]) -> Production:
    """Run the README's commands in order; the last one is the server."""
    *setup, serve = readme_commands()
    for command in setup:
        subprocess.run([sys.executable, *command[1:]], cwd=ROOT, env=env, check=True, timeout=180)
    assert serve[1] == "-m", serve  # `.venv/bin/python -m uvicorn …`
    port = free_port()
    args = serve[2:]
    args[args.index("--host") + 1] = "127.0.0.1"
    args[args.index("--port") + 1] = str(port)
    log = tmp / "server.log"
    proc = start_module(args, port, env, log=log)
    return Production(f"http://127.0.0.1:{port}", log, proc, env)
