"""HAProxy in front of workers, configured as docs/deploy.md ships it: round robin in ``mode
http``, WebSockets as tunnels, a readiness check (``GET /readyz``) that takes a worker out while
it starts or drains; no affinity (a legacy MCP session is reached through the workers)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.servers import output, spawn, stop, wait_for_port

DOCS = Path(__file__).resolve().parent.parent / "docs" / "deploy.md"


def haproxy_config(port: int, workers: list[int]) -> str:
    """The configuration docs/deploy.md ships, bound to ``port``, over workers on ``workers``'
    ports."""
    text = DOCS.read_text()
    [config] = re.findall(r"```haproxy\n(.*?)```", text, re.S)
    config, bound = re.subn(r"(?m)^(\s+bind )\S+$", rf"\g<1>127.0.0.1:{port}", config)
    assert bound == 1, "the documented configuration has no bind line"
    lines = [line for line in config.splitlines() if not line.strip().startswith("server ")]
    servers = [f"    server w{n} 127.0.0.1:{w} check" for n, w in enumerate(workers, 1)]
    return "\n".join(lines + servers) + "\n"


def start_haproxy(port: int, workers: list[int], folder: Path) -> subprocess.Popen[bytes]:
    """HAProxy (the distribution's, installed by ``make test``) on ``port``; its configuration
    and log in ``folder``."""
    binary = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if binary is None:
        pytest.fail("haproxy is missing: make test installs it (apt-get install haproxy)")
    config = folder / "haproxy.cfg"
    config.write_text(haproxy_config(port, workers))
    proc = spawn([binary, "-db", "-f", str(config)], {}, output("haproxy", folder / "haproxy.log"))
    try:
        wait_for_port(port, proc)
    except BaseException:
        stop(proc)
        raise
    return proc
