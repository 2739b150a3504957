"""The chat socket under real servers, daphne and uvicorn: the close code a client sees when the
application refuses a message, a quiet log when clients vanish in the middle of a turn, and,
behind HAProxy as docs/deploy.md configures it, each client's own address counted by the caps
per address (not the balancer's, nor one a client wrote into the header)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from tests.balancer import start_haproxy
from tests.servers import free_port, migrated_env, start_daphne, start_uvicorn, stop

BOOK = json.dumps({"type": "user_message", "text": "Book a flight from JFK to LAX"})


@dataclass
class Live:
    """A server process of one kind, its address and its log."""

    kind: str
    base: str
    log: Path
    proc: subprocess.Popen[bytes]

    def stop(self) -> str:
        """Stop the server; its whole log."""
        stop(self.proc)
        return self.log.read_text(errors="replace")


@pytest.fixture(params=["daphne", "uvicorn"])
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Live]:
    kind = str(request.param)
    env = migrated_env(tmp_path / "db.sqlite3")
    port, log = free_port(), tmp_path / f"{kind}.log"
    if kind == "daphne":
        # Frames up to 1 MiB reach the application: its own 64 KiB limit is what is tested here.
        options = ["--websocket-max-message-size", "1048576"]
        proc = start_daphne(port, env, options=options, log=log)
    else:  # uvicorn's own limit is 16 MiB
        proc = start_uvicorn(port, env, log=log)
    try:
        yield Live(kind, f"http://127.0.0.1:{port}", log, proc)
    finally:
        stop(proc)


async def new_browser(base: str) -> tuple[str, str]:
    """A new browser session on the server: its cookie header and its first conversation."""
    async with aiohttp.ClientSession() as http, http.get(f"{base}/", allow_redirects=False) as page:
        return f"sessionid={page.cookies['sessionid'].value}", page.headers["Location"].split("/")[
            -2
        ]


async def open_socket(
    live: Live, browser: tuple[str, str], *, api: bool = True
) -> ClientConnection:
    """A connected socket (JSON protocol, or HTML fragments as a browser gets them) that has
    received its first event."""
    cookie, conversation = browser
    query = "?format=json" if api else ""
    socket = await websockets.connect(
        f"{live.base.replace('http://', 'ws://')}/ws/chat/{conversation}/{query}",
        additional_headers={"Cookie": cookie, "Origin": live.base},
        open_timeout=10,
    )
    await asyncio.wait_for(socket.recv(), 10)  # the conversation's state
    return socket


async def next_event(socket: ClientConnection, kind: str) -> dict[str, Any]:
    while True:
        event = json.loads(await asyncio.wait_for(socket.recv(), 20))
        if event["type"] == kind:
            return dict(event)


def failures(log: str) -> str:
    """The exceptions a log reports, each with how often, and its first traceback."""
    raised = Counter(re.findall(r"^(\w[\w.]*(?:Error|Exception|Disconnected)\b.*)$", log, re.M))
    first = log[log.index("Traceback") :][:2500] if "Traceback" in log else ""
    return f"{dict(raised)}\n{first}"


async def test_an_oversized_message_gets_too_large_then_close_code_4009(live: Live) -> None:
    socket = await open_socket(live, await new_browser(live.base))
    await socket.send("x" * (100 * 1024))
    refusal = json.loads(await asyncio.wait_for(socket.recv(), 10))
    assert refusal == {
        "type": "error",
        "code": "TOO_LARGE",
        "message": "Messages are limited to 64 KiB.",
    }
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(socket.recv(), 10)
    assert socket.close_code == 4009, f"{live.kind} closed with {socket.close_code}"
    log = live.stop()
    assert "Traceback" not in log, failures(log)


@pytest.mark.slow
async def test_clients_that_vanish_mid_turn_leave_no_tracebacks(live: Live) -> None:
    rounds, crowd = 3, 18
    for _ in range(rounds):
        browser = await new_browser(live.base)
        driver = await open_socket(live, browser)
        sockets = [await open_socket(live, browser, api=False) for _ in range(crowd)]
        await driver.send(BOOK)
        # The driver (JSON) has the user's message; the browsers' sockets are still waiting for
        # their copy (each renders a sidebar link from the database first). Now a third of
        # them close properly, a third drop their TCP connection and a third send a message
        # the application refuses by closing them, while the turn's events keep coming.
        await next_event(driver, "user_message")
        for i, socket in enumerate(sockets):
            if i % 3 == 0:
                await socket.send("x" * (70 * 1024))
            elif i % 3 == 1:
                socket.transport.abort()
        await asyncio.gather(*(s.close() for i, s in enumerate(sockets) if i % 3 == 2))
        assert (await next_event(driver, "elicit"))["key"] == "pick_flight"
        await driver.close()
        await asyncio.gather(*(s.close() for i, s in enumerate(sockets) if i % 3 == 0))

    # The server still serves a booking to its question.
    socket = await open_socket(live, await new_browser(live.base))
    await socket.send(BOOK)
    assert (await next_event(socket, "elicit"))["key"] == "pick_flight"
    await socket.close()
    log = live.stop()  # daphne reports a failed application when it reaps it, once a second
    # daphne logs every socket that goes; uvicorn's websockets-sansio logs none, only each
    # one it accepted.
    seen = log.count("WSDISCONNECT" if live.kind == "daphne" else "[accepted]")
    assert seen >= rounds * (crowd + 1)
    assert "Traceback" not in log, failures(log)


@pytest.fixture(scope="module")
def balanced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """HAProxy (docs/deploy.md's configuration) in front of one uvicorn worker that trusts it
    (CHATBRIDGE_TRUSTED_PROXIES) and lets each client address hold two sockets: the
    balancer's address and the worker's own."""
    tmp = tmp_path_factory.mktemp("balanced")
    env = migrated_env(tmp / "db.sqlite3")
    env.update(CHATBRIDGE_TRUSTED_PROXIES="127.0.0.1", CHATBRIDGE_SOCKETS_PER_ADDRESS="2")
    port, front = free_port(), free_port()
    worker = start_uvicorn(port, env, log=tmp / "worker.log")
    try:
        proxy = start_haproxy(front, [port], tmp)
        try:
            yield f"http://127.0.0.1:{front}", f"http://127.0.0.1:{port}"
        finally:
            stop(proxy)
    finally:
        stop(worker)


async def socket_from(base: str, local: str, forged: str | None = None) -> ClientConnection:
    """A new browser's socket, its connection made from the loopback address ``local`` (with
    an ``X-Forwarded-For`` of its own making, if ``forged``); its first event received."""
    cookie, conversation = await new_browser(base)
    headers = {"Cookie": cookie, "Origin": base}
    if forged:
        headers["X-Forwarded-For"] = forged
    return await websockets.connect(
        f"{base.replace('http://', 'ws://')}/ws/chat/{conversation}/?format=json",
        additional_headers=headers,
        open_timeout=10,
        local_addr=(local, 0),
    )


async def first_event(socket: ClientConnection) -> dict[str, Any]:
    return dict(json.loads(await asyncio.wait_for(socket.recv(), 10)))


async def assert_refused(socket: ClientConnection) -> None:
    refusal = await first_event(socket)
    assert (refusal["type"], refusal["code"]) == ("error", "TOO_MANY_SOCKETS"), refusal
    assert refusal["message"] == (
        "2 chat pages are open from your network, the most we allow at once. Close some of "
        "them, then reload this page."
    )
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(socket.recv(), 10)
    assert socket.close_code == 4429


async def test_behind_haproxy_each_client_address_counts_and_no_forged_one(
    balanced: tuple[str, str],
) -> None:
    front, worker = balanced
    held: list[ClientConnection] = []
    try:
        for _ in range(2):  # two fresh cookies from 127.0.0.2: its two places
            held.append(await socket_from(front, "127.0.0.2"))
            assert (await first_event(held[-1]))["type"] == "conversation_state"
        await assert_refused(await socket_from(front, "127.0.0.2"))
        # 127.0.0.3 is someone else, though the balancer's address is the same; naming
        # 127.0.0.2 in a header of its own does not make it count as 127.0.0.2 either.
        for forged in (None, "127.0.0.2"):
            held.append(await socket_from(front, "127.0.0.3", forged))
            assert (await first_event(held[-1]))["type"] == "conversation_state"
        await assert_refused(await socket_from(front, "127.0.0.3"))
        # Straight to the worker, the header is not read at all: the connection's own address.
        held.append(await socket_from(worker, "127.0.0.4", "127.0.0.2"))
        assert (await first_event(held[-1]))["type"] == "conversation_state"
    finally:
        await asyncio.gather(*(socket.close() for socket in held))
