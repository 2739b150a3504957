"""Shared fixtures: session managers, a fresh chat runtime, a real daphne, a real chromium."""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The servers the tests start listen on loopback only; their /mcp is deliberately open (the
# policy itself is tested with its own settings in test_deployment.py).
os.environ.setdefault("CHATBRIDGE_MCP_PUBLIC", "1")

import contextlib  # noqa: E402
import shutil  # noqa: E402
import uuid  # noqa: E402
from collections.abc import AsyncIterator, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import pytest_asyncio  # noqa: E402
from channels.layers import channel_layers  # noqa: E402
from playwright.async_api import Browser, async_playwright  # noqa: E402

from chatbridge import SessionManager  # noqa: E402
from chatbridge.author.sampling import LiteLLMSampler  # noqa: E402
from chatbridge.calls.links import MemoryUrlLinks  # noqa: E402
from chatbridge.runtime import ChatBridgeRuntime, RuntimeNotRunning, current_runtime  # noqa: E402
from tests.production import Production, production_env, start_production  # noqa: E402
from tests.servers import (  # noqa: E402
    CHROMIUM_ARGS,
    CHROMIUM_PROGRAMS,
    free_port,
    migrated_env,
    start_daphne,
    stop,
)


@pytest.fixture(scope="session")
def django_db_modify_db_settings_xdist_suffix(request: pytest.FixtureRequest) -> None:
    """Each pytest process gets a test database of its own: pytest-xdist's workers by their
    id and their run's (pytest-django gives the id only), a run without workers by its pid,
    so two runs at once on one checkout never share (and break) one database file."""
    from django.conf import settings

    worker = getattr(request.config, "workerinput", {})
    run = f"{worker['workerid']}_{worker['testrunuid'][:8]}" if worker else f"pid{os.getpid()}"
    suffix = run
    for database in settings.DATABASES.values():
        test = database.setdefault("TEST", {})
        name = test.get("NAME") or f"test_{database['NAME']}"
        test["NAME"] = f"{name}_{suffix}"


@pytest.fixture
async def manager() -> AsyncIterator[SessionManager]:
    """A manager sampling the offline model; every session ends with the test."""
    mgr = SessionManager(sampler=LiteLLMSampler("offline/test"), url_links=MemoryUrlLinks())
    yield mgr
    await mgr.shutdown("test finished")


@pytest.fixture
async def fresh_runtime() -> AsyncIterator[ChatBridgeRuntime]:
    """Each test gets its own started runtime (hub, sessions, writer, listener, MCP) and channel
    layer, closed afterwards — with any runtime the test started in its place."""
    channel_layers.backends.clear()
    started = ChatBridgeRuntime.from_settings()
    await started.start()
    try:
        yield started
    finally:
        await started.aclose()
        with contextlib.suppress(RuntimeNotRunning):
            await current_runtime().aclose()


MCP_REQUEST_TIMEOUT = 3


@pytest.fixture(scope="session")
def server_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SQLite database of ``server``: tests read there what a call left on record."""
    return tmp_path_factory.mktemp("browser") / "db.sqlite3"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, server_database: Path) -> Iterator[str]:
    """A migrated database and daphne serving the app on a free port, as ``make run`` starts
    it (frames over 64 KiB refused by daphne itself)."""
    env = migrated_env(server_database)
    # Unanswered MCP requests time out quickly.
    env["CHATBRIDGE_MCP_REQUEST_TIMEOUT"] = str(MCP_REQUEST_TIMEOUT)
    port = free_port()
    options = ["--websocket-max-message-size", "65536"]
    log = tmp_path_factory.getbasetemp() / "daphne.log"
    proc = start_daphne(port, env, options=options, log=log)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def production(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Production]:
    """The app started by docs/production.md's production commands (uvicorn, production settings,
    no MCP policy chosen)."""
    tmp = tmp_path_factory.mktemp("production")
    server = start_production(tmp, production_env(tmp))
    try:
        yield server
    finally:
        stop(server.proc)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def chromium() -> AsyncIterator[Browser]:
    """One chromium per pytest process (a launch costs seconds of CPU): the browser tests run
    in the session's event loop (``pytest_collection_modifyitems``), each in contexts of its
    own (``browser``)."""
    executable = next(filter(None, map(shutil.which, CHROMIUM_PROGRAMS)), None)
    if executable is None:
        message = (
            "chromium-headless-shell is not installed (make test installs it when run as root)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


@pytest_asyncio.fixture(loop_scope="session")
async def browser(chromium: Browser) -> AsyncIterator[Browser]:
    """The process's chromium, as a test sees it: whatever contexts and pages the test opens
    (``new_page`` opens a context of its own) are closed when it ends, so the next test
    starts with none: no cookie, storage or page of another test."""
    assert chromium.is_connected(), "chromium went away during an earlier test"
    yield chromium
    for context in list(chromium.contexts):
        await context.close()


# Tests that start server processes or node clients (each takes seconds): `slow`, so
# `make test-fast` leaves them out. Whole modules, any test using a live server fixture, and
# tests marked `slow` where they stand (a fresh interpreter, mypy) in modules whose other tests
# run in process.
PROCESS_MODULES = frozenset(
    {
        "test_access_logs",
        "test_concurrency",
        "test_conformance_suite",
        "test_deployment",
        "test_independent_clients",
        "test_lifecycle",
        "test_outside_project",
        "test_restart",
        "test_scale_out",
        "test_socket_servers",
        "test_url_restart",
        "test_worker_faults",
    }
)
PROCESS_FIXTURES = frozenset(
    {
        "mcp_server",  # test_origins: daphne
        "own_redis",  # test_worker_faults: a private redis-server
        "production",
        "server",
        "short_ttl_site",
        "site",
        "uvicorn_url",  # test_mcp: uvicorn
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``browser`` on every test that drives chromium; ``slow`` on every test that starts
    servers or clients in processes of their own."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "browser" in fixtures:
            item.add_marker(pytest.mark.browser)
            # In the loop the shared chromium was launched in (its objects belong to it).
            item.add_marker(pytest.mark.asyncio(loop_scope="session"), append=False)
        if item.path.stem in PROCESS_MODULES or fixtures & PROCESS_FIXTURES:
            item.add_marker(pytest.mark.slow)


def pytest_configure(config: pytest.Config) -> None:
    """The tests run with the production settings, which serve collected static files: collect
    them before any test module builds the ASGI app (servestatic reads the folder then). With
    parallel workers (pytest-xdist) the main process collects them once, before any worker
    starts: workers collecting into one folder at once would race."""
    import django
    from django.core.management import call_command

    django.setup()
    if not hasattr(config, "workerinput"):
        call_command("collectstatic", "--noinput", "-v0")
        # The run's id, known here before pytest-xdist makes one for its workers: they share
        # the run's database templates (tests.servers.migrated_template), removed at its end.
        if getattr(config.option, "testrunuid", "") is None:
            config.option.testrunuid = uuid.uuid4().hex
        run = getattr(config.option, "testrunuid", None) or f"pid{os.getpid()}"
        os.environ["PYTEST_XDIST_TESTRUNUID"] = run


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Servers a failed test left running are stopped (and named: a test that leaves one is to
    be mended); a parallel worker hands what the reliability suite counted to the main process."""
    from tests.reliability import COUNTS
    from tests.servers import drop_postgres_template, stop_leftovers, template_folder

    for server in stop_leftovers():
        print(f"\nstopped a server a test left running: {server}", file=sys.stderr)
    if not hasattr(session.config, "workerinput"):
        host, port = os.environ.get("CHATBRIDGE_TEST_PG", "127.0.0.1:5432").split(":")
        try:
            drop_postgres_template(host, port)
        except Exception as exc:  # PostgreSQL gone by now: say so, and end the run
            print(f"\nthe run's PostgreSQL template was not dropped: {exc}", file=sys.stderr)
        shutil.rmtree(template_folder(), ignore_errors=True)

    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["reliability_counts"] = json.dumps(COUNTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The main process gathers the counts of each parallel worker (pytest-xdist's hook)."""
    from tests.reliability import COUNTS

    counts = getattr(node, "workeroutput", {}).get("reliability_counts")
    if counts:
        COUNTS.update(json.loads(counts))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print what the reliability suite counted."""
    from tests.reliability import COUNTS

    if COUNTS:
        terminalreporter.section("reliability counts")
        for name, counts in COUNTS.items():
            details = ", ".join(f"{k}={v}" for k, v in counts.items())
            terminalreporter.write_line(f"{name}: {details}")
