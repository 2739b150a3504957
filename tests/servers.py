"""Starting real servers for tests: free ports and waiting for them to listen."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

import pytest

from tests import zygote

ROOT = Path(__file__).resolve().parent.parent
# Debian's chromium-headless-shell (the old headless shell, what Playwright itself runs headless)
# before the full browser: it costs 40 % less CPU on the same tests; a machine with only
# chromium still runs them.
CHROMIUM_PROGRAMS = ("chromium-headless-shell", "chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # One renderer process for every page of the browser (each test's contexts still keep
    # their cookies and storage apart): a process started per page and per site cost more
    # CPU than the pages themselves (the browser tests' chromium time fell from 250 s to 100 s).
    "--renderer-process-limit=1",
    "--disable-site-isolation-trials",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fixed_port() -> int:
    """A free port below the kernel's ephemeral range, for a server the test stops and starts
    again on the same port: while it is down, a client reconnecting to an ephemeral-range port
    can be given that very port as its own and connect to itself (TCP self-connect), which
    then hangs its reads and takes the port from the restarted server."""
    low = 20000
    try:
        low_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low_ephemeral = 32768
    for port in random.sample(range(low, max(low + 1000, low_ephemeral)), 200):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


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


def stop(proc: subprocess.Popen[bytes], patience: float = 5.0) -> None:
    """Terminate a server, and kill it if it does not exit within ``patience`` seconds (open
    WebSockets). A test that reads what the server wrote on its way out gives it the time a
    loaded machine needs: a kill loses the writes it had queued."""
    proc.terminate()
    try:
        proc.wait(timeout=patience)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


# Every test client comes from 127.0.0.1: the per-address cap of MCP sessions (32) would count
# a whole test run's clients as one caller, and so would the chat's caps per client address.
# The caps have tests of their own (test_mcp_caps.py, test_visitor_limits.py,
# test_queue_limits.py and, behind HAProxy, test_socket_servers.py).
ONE_ADDRESS = {
    "CHATBRIDGE_MCP_MAX_SESSIONS_PER_CALLER": "100000",
    "CHATBRIDGE_MCP_MAX_CALLS_PER_CALLER": "100000",
    "CHATBRIDGE_SOCKETS_PER_ADDRESS": "none",
    "CHATBRIDGE_RUNNING_TURNS_PER_ADDRESS": "none",
    "CHATBRIDGE_QUEUE_PER_ADDRESS": "none",
    "CHATBRIDGE_WS_RATE_PER_ADDRESS": "1000000",
    "CHATBRIDGE_WS_BURST_PER_ADDRESS": "1000000",
}


def migrated_env(database: Path, settings: str = "chatbridge.settings") -> dict[str, str]:
    """The environment of a server on a fresh SQLite ``database``, migrated: a copy of the
    run's migrated template for ``settings`` (``manage.py migrate`` runs once per run and
    settings module, not once per server: it costs seconds of CPU)."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "DJANGO_SETTINGS_MODULE": settings,
        **ONE_ADDRESS,
    }
    shutil.copyfile(migrated_template(settings), database)
    return env


def template_folder() -> Path:
    """Where this test run keeps its database templates (removed when the run ends: conftest's
    ``pytest_sessionfinish``); the run is pytest-xdist's, so its workers share it."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getpid()}")
    return Path(tempfile.gettempdir()) / f"chatbridge-templates-{os.getuid()}" / run


def migrated_template(settings: str = "chatbridge.settings") -> Path:
    """A SQLite database migrated by ``manage.py migrate`` with ``settings``, made once per test
    run for every settings module with the same schema (``_schema``) and shared by the run's
    pytest-xdist workers (a lock file keeps two from making it at once). Only copies of it are
    served: nothing writes to it once made."""
    folder = template_folder()
    folder.mkdir(parents=True, exist_ok=True)
    schema = _schema(settings)
    template = folder / f"{schema}.sqlite3"
    with (folder / f"{schema}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            making = folder / f"{schema}.{os.getpid()}.making"
            env = {
                **os.environ,
                "DATABASE_URL": f"sqlite:///{making}",
                "DJANGO_SETTINGS_MODULE": settings,
            }
            manage = [sys.executable, "manage.py", "migrate", "--noinput", "-v0"]
            subprocess.run(manage, cwd=ROOT, env=env, check=True, timeout=120)
            making.rename(template)  # whole, or not there
    return template


def _schema(settings: str) -> str:
    """What a database migrated with ``settings`` depends on, as a name: its installed apps
    and its user model (the test settings modules differ in plugins and options, not in
    these, so they share one template)."""
    module = importlib.import_module(settings)
    apps = (list(module.INSTALLED_APPS), getattr(module, "AUTH_USER_MODEL", "auth.User"))
    return "schema-" + hashlib.sha256(repr(apps).encode()).hexdigest()[:12]


def postgres_template(host: str, port: str) -> str:
    """The name of a PostgreSQL database migrated by ``manage.py migrate`` with the demo
    settings, with the staff user ``ops`` (password ``DJANGO_SUPERUSER_PASSWORD``'s
    ``pw-123456``): made once per test run, shared by its workers, dropped when the run ends
    (``drop_postgres_template``). ``CREATE DATABASE … TEMPLATE`` copies it in a moment."""
    import psycopg

    name = _postgres_template_name()
    folder = template_folder()
    folder.mkdir(parents=True, exist_ok=True)
    admin = f"postgresql://postgres@{host}:{port}/postgres"
    with (folder / "postgres.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "postgres.made").exists():
            return name
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "chatbridge.settings",
            "DATABASE_URL": f"postgres://postgres@{host}:{port}/{name}",
            "DJANGO_SUPERUSER_PASSWORD": "pw-123456",
        }
        for command in (
            ["migrate", "--noinput", "-v0"],
            ["createsuperuser", "--noinput", "--username", "ops", "--email", "o@x.invalid"],
        ):
            subprocess.run(
                [sys.executable, "manage.py", *command],
                cwd=ROOT,
                env=env,
                check=True,
                timeout=120,
                capture_output=True,
            )
        (folder / "postgres.made").touch()
    return name


def postgres_copy(name: str, host: str, port: str) -> None:
    """A new PostgreSQL database ``name``, a copy of the run's migrated template. Copies are
    made one at a time: PostgreSQL refuses to copy a database another session is reading."""
    import psycopg

    template = postgres_template(host, port)
    with (template_folder() / "postgres.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        admin = f"postgresql://postgres@{host}:{port}/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')


@contextlib.contextmanager
def migrated_postgres(host: str, port: str, prefix: str = "chatbridge_test") -> Iterator[str]:
    """The URL of a new PostgreSQL database, a copy of the run's migrated template (with its
    staff user ``ops``), dropped when the block ends."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    postgres_copy(name, host, port)
    try:
        yield f"postgres://postgres@{host}:{port}/{name}"
    finally:
        admin = f"postgresql://postgres@{host}:{port}/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def drop_postgres_template(host: str, port: str) -> None:
    """Drop the run's PostgreSQL template, if it made one."""
    if not (template_folder() / "postgres.made").exists():
        return
    import psycopg

    admin = f"postgresql://postgres@{host}:{port}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{_postgres_template_name()}" WITH (FORCE)')


def _postgres_template_name() -> str:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getpid()}")
    return f"chatbridge_template_{run[:16]}"


def superuser(database: Path, prefix: str = "ops") -> tuple[str, str]:
    """A new superuser in the served ``database`` (by ``manage.py createsuperuser``, as an
    operator makes one): its name and password."""
    name, password = f"{prefix}-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "DJANGO_SETTINGS_MODULE": "chatbridge.settings",
        "DJANGO_SUPERUSER_PASSWORD": password,
    }
    manage = [sys.executable, "manage.py", "createsuperuser", "--noinput", "--username", name]
    subprocess.run([*manage, "--email", "ops@example.com"], cwd=ROOT, env=env, check=True)
    return name, password


def log_path(name: str, log: Path | None) -> Path | None:
    """The file a server writes to: ``log``, else ``$CHATBRIDGE_TEST_LOGS/<name>.log``, else
    none."""
    if log is not None:
        return log
    logs = os.environ.get("CHATBRIDGE_TEST_LOGS")
    return Path(logs) / f"{name}.log" if logs else None


def output(name: str, log: Path | int | None) -> IO[bytes] | int:
    """Where a server writes: ``log`` (a file, or ``subprocess.PIPE`` to read it as it comes),
    else ``$CHATBRIDGE_TEST_LOGS/<name>.log``, else nowhere."""
    if isinstance(log, int):
        return log
    path = log_path(name, log)
    return path.open("wb") if path is not None else subprocess.DEVNULL


# Every server this process started and has not seen exit: whatever a test did, they are
# stopped when its session ends (``stop_leftovers``, from conftest's pytest_sessionfinish).
_started: list[subprocess.Popen[bytes]] = []


def _spawn(
    command: list[str], env: dict[str, str], out: IO[bytes] | int
) -> subprocess.Popen[bytes]:
    return spawn([sys.executable, "-m", *command], env, out)


def spawn(argv: list[str], env: dict[str, str], out: IO[bytes] | int) -> subprocess.Popen[bytes]:
    """Run ``argv`` from the project's root, writing to ``out``; stopped at the session's end
    if a test leaves it running."""
    try:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    finally:
        if not isinstance(out, int):
            out.close()  # the server has its own copy
    _started.append(proc)
    return proc


def stop_leftovers() -> list[str]:
    """Stop the servers still running that this process started (a test that failed before it
    could stop them); what was stopped, for the log."""
    left = [proc for proc in _started if proc.poll() is None]
    for proc in left:
        stop(proc)
    _started.clear()
    return [_name(list(proc.args)) for proc in left]  # type: ignore[arg-type]


def _name(argv: list[str]) -> str:
    """A server's command line, without ``python -m``."""
    return " ".join(str(a) for a in (argv[2:] if argv[1:2] == ["-m"] else argv))


def start_each(*starts: Callable[[], subprocess.Popen[bytes]]) -> list[subprocess.Popen[bytes]]:
    """Start several servers, one after the other; if one does not start, those started before
    it are stopped before the failure is raised."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        for start in starts:
            started.append(start())
    except BaseException:
        for proc in started:
            stop(proc)
        raise
    return started


def start_module(
    command: Sequence[str], port: int, env: dict[str, str], *, log: Path | int | None = None
) -> subprocess.Popen[bytes]:
    """``python -m <command>``, a server listening on ``port``, listening on return (forked
    from the zygote, ``tests.zygote``, unless its output is read through a pipe). Its output
    goes to ``log``, else ``$CHATBRIDGE_TEST_LOGS/<module>-<port>.log`` when that is set, else
    nowhere."""
    name = f"{command[0]}-{port}"
    if isinstance(log, int):
        proc = _spawn(list(command), env, output(name, log))
    else:
        path = log_path(name, log)
        proc = zygote.fork(command, env, str(ROOT), str(path) if path is not None else None)
        _started.append(proc)
    try:
        wait_for_port(port, proc)
    except BaseException:  # it did not come up in time: it must not stay behind
        stop(proc)
        raise
    return proc


def start_daphne(
    port: int, env: dict[str, str], *, options: Sequence[str] = (), log: Path | int | None = None
) -> subprocess.Popen[bytes]:
    """daphne serving the project on ``port`` (with extra command-line ``options``)."""
    command = ["daphne", *options, "-b", "127.0.0.1", "-p", str(port)]
    return start_module([*command, "chatbridge.asgi:application"], port, env, log=log)


@contextlib.contextmanager
def daphne_site(tmp: Path, **settings: str) -> Iterator[str]:
    """daphne on a fresh database in ``tmp`` with ``settings`` from the environment; its base
    URL while the block runs (its log is ``tmp/daphne.log``)."""
    env = migrated_env(tmp / "db.sqlite3")
    env.update(settings)
    port = free_port()
    proc = start_daphne(port, env, log=tmp / "daphne.log")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


def start_uvicorn(
    port: int, env: dict[str, str], *, log: Path | int | None = None
) -> subprocess.Popen[bytes]:
    """uvicorn serving the project like the production command, but without its frame limit, so
    that what refuses a large message is the application's own check."""
    command = ["uvicorn", "chatbridge.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    options = ["--lifespan", "on", "--ws", "websockets-sansio", "--no-proxy-headers"]
    return start_module([*command, *options], port, env, log=log)
