"""``manage.py runserver``, a Django developer's reflex, in chromium: with daphne first in
INSTALLED_APPS (this project's settings, and the install guide's) the chat's page and its
socket are served; without it, Django's own runserver serves the page through WSGI, and the
page says the server does not serve the chat's connection instead of "Offline"."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.servers import free_port, migrated_env, output, spawn, stop, wait_for_port
from tests.test_browser import ask_for_flights

pytestmark = pytest.mark.slow

UNSERVED = "This server does not serve the chat's connection"


def runserver(tmp: Path, settings: str) -> Iterator[str]:
    env = migrated_env(tmp / "db.sqlite3", settings)
    env["DJANGO_DEBUG"] = "1"  # runserver serves the static files in debug only
    port = free_port()
    argv = [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]
    proc = spawn(argv, env, output(f"runserver-{port}", tmp / "runserver.log"))
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture
def with_daphne(tmp_path: Path) -> Iterator[str]:
    yield from runserver(tmp_path, "chatbridge.settings")


@pytest.fixture
def without_daphne(tmp_path: Path) -> Iterator[str]:
    yield from runserver(tmp_path, "tests.wsgi_settings")


async def test_runserver_with_daphne_first_serves_the_chat_and_its_socket(
    browser: Browser, with_daphne: str
) -> None:
    page = await browser.new_page()
    await page.goto(with_daphne + "/")
    await expect(page.locator("#connection-state")).to_have_text("Connected")
    await ask_for_flights(page)  # the socket carries the message and the flight list back
    await page.close()


async def test_runserver_without_daphne_says_the_chat_cannot_connect_and_why(
    browser: Browser, without_daphne: str
) -> None:
    page = await browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    await page.goto(without_daphne + "/")
    state = page.locator("#connection-state")
    await expect(state).to_have_text(UNSERVED)
    await expect(state).to_have_attribute("data-state", "unserved")
    assert any('put "daphne" first in INSTALLED_APPS' in e for e in errors), errors
    # The page goes on trying (the server may be fixed); each try that fails leaves the words
    # as they are, never "Connecting…" then "Offline".
    for _ in range(2):
        async with page.expect_event("websocket", timeout=30000) as attempt:
            pass
        socket, ended = await attempt.value, asyncio.get_running_loop().create_future()
        for event in ("close", "socketerror"):  # refused: an error, then closed
            socket.on(event, lambda _=None, f=ended: f.done() or f.set_result(None))
        await asyncio.wait_for(ended, 30)
        await expect(state).to_have_text(UNSERVED)
        await expect(state).to_have_attribute("data-state", "unserved")
    await page.close()
