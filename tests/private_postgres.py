"""A PostgreSQL cluster of the test's own, which the test stops, starts and restarts.

The shared PostgreSQL serves every engineer's tests; a restart there would break theirs. This
one lives in a temporary directory, listens on a port of its own (loopback only) and is gone
with the test. PostgreSQL refuses to run as root: as root, its programs run as the
``postgres`` OS user (``runuser``), in a directory handed to that user.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.servers import fixed_port

__all__ = ["PrivatePostgres", "pg_bin", "private_postgres"]

OS_USER = "postgres"


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's programs (``initdb``, ``pg_ctl``), if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    return Path(found[-1]).parent if found else None


def _version(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


class PrivatePostgres:
    """``initdb`` into a temporary directory; ``start``, ``stop``, ``restart`` with pg_ctl."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.port = fixed_port()  # restarted on the same port
        self.root = Path(tempfile.mkdtemp(prefix="chatbridge-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.as_root = os.geteuid() == 0
        if self.as_root:  # initdb and postgres refuse root; the OS user owns the directory
            shutil.chown(self.root, OS_USER, OS_USER)
        self._run(
            "initdb",
            ["-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"],
        )
        settings = {
            "port": str(self.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.root}'",
            "max_connections": "100",
            "fsync": "off",  # a test cluster: nothing here must survive a power cut
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "shared_buffers": "32MB",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def database_url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, program: str, args: list[str]) -> None:
        command = [str(self.bin / program), *args]
        if self.as_root:
            command = ["runuser", "-u", OS_USER, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{program} failed: {result.stderr or result.stdout}\n{log}")

    def start(self) -> None:
        """Start the cluster and wait until it accepts connections."""
        self._run("pg_ctl", ["-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start"])

    def stop(self) -> None:
        """Stop it the way a restart does (``-m fast``: sessions are cut off, no waiting)."""
        self._run("pg_ctl", ["-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop"])

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def remove(self) -> None:
        if self.running():
            self._run("pg_ctl", ["-D", str(self.data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started cluster of the test's own, removed afterwards (skipped without PostgreSQL's
    server programs; in CI their absence fails the test)."""
    bin_dir = pg_bin()
    if bin_dir is None:
        message = "PostgreSQL's server programs (/usr/lib/postgresql/*/bin) are not installed"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    cluster = PrivatePostgres(bin_dir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()
