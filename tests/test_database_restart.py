"""PostgreSQL restarted under load, on a cluster of the test's own: no booking is lost or
doubled, and a page asked for while the database is away gets 503 with Retry-After, not 500."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from plugins.book_flight.data import seat_map_for
from tests.chat_http import TEST_CARD, RemoteChat
from tests.private_postgres import PrivatePostgres, private_postgres
from tests.production import production_env
from tests.servers import ROOT, free_port, start_uvicorn, stop

pytestmark = [pytest.mark.services, pytest.mark.slow]

BOOKINGS = 12
DOWN = 4.0  # seconds the database stays away in each restart
POOL_TIMEOUT = 2  # seconds a page waits for a connection before its 503


@pytest.fixture
def pg() -> Iterator[PrivatePostgres]:
    with private_postgres() as cluster:
        yield cluster


@dataclass
class Server:
    base: str
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes]


@pytest.fixture
def server(pg: PrivatePostgres, tmp_path: Path) -> Iterator[Server]:
    """The production server (uvicorn, production settings) on the private cluster."""
    env = production_env(
        tmp_path,
        DATABASE_URL=pg.url,
        DATABASE_POOL_TIMEOUT=str(POOL_TIMEOUT),
        CHATBRIDGE_MCP_PUBLIC="1",
    )
    for command in (["migrate", "--noinput", "-v0"], ["collectstatic", "--noinput", "-v0"]):
        subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=180,
            capture_output=True,
        )
    port = free_port()
    log = tmp_path / "server.log"
    proc = start_uvicorn(port, env, log=log)
    try:
        yield Server(f"http://127.0.0.1:{port}", env, log, proc)
    finally:
        stop(proc)


@dataclass
class PageLoads:
    """Pages asked for in a loop while the database restarts: what each answer was."""

    http: aiohttp.ClientSession
    base: str
    chat: RemoteChat
    seen: list[tuple[int, str | None, str]] = field(default_factory=list)

    async def one(self) -> None:
        cookie = {"Cookie": f"sessionid={self.chat.cookie}"}
        for path, headers in (
            (f"/c/{self.chat.conversation_id}/", cookie),  # reads the conversation
            ("/", {}),  # a new visitor: a session and a conversation are written
        ):
            async with self.http.get(
                self.base + path, headers=headers, allow_redirects=False
            ) as page:
                text = await page.text()
                self.seen.append((page.status, page.headers.get("Retry-After"), text[:300]))

    async def until(self, done: asyncio.Event) -> None:
        while not done.is_set():
            await self.one()
            await asyncio.sleep(0.1)  # a person reloading, not a flood


class Lost(Exception):
    """A booking ended (its call failed) or was refused instead of going on."""


async def next_step(chat: RemoteChat, kind: str, **match: Any) -> dict[str, Any]:
    """The booking's next ``kind`` event (with ``match``); ``Lost`` if its call failed or a
    command was refused first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    assert chat.socket is not None
    while True:
        async with asyncio.timeout_at(deadline):  # not receive(timeout=): pings restart it
            message = await chat.socket.receive()
        assert message.type == aiohttp.WSMsgType.TEXT, message
        event = json.loads(message.data)
        chat.events.append(event)
        if event["type"] == kind and all(event.get(k) == v for k, v in match.items()):
            return dict(event)
        if event["type"] == "error" or event.get("status") in ("failed", "aborted"):
            raise Lost(event)


async def each(steps: list[Awaitable[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every booking's step; fails saying how many bookings were lost, and how."""
    outcomes = await asyncio.gather(*steps, return_exceptions=True)
    lost = [repr(o)[:300] for o in outcomes if isinstance(o, BaseException)]
    assert not lost, f"{len(lost)} of {len(outcomes)} bookings lost: {lost}"
    return [o for o in outcomes if not isinstance(o, BaseException)]


async def restart_under(
    pg: PrivatePostgres, pages: PageLoads, work: Callable[[], Coroutine[Any, Any, Any]]
) -> Any:
    """Stop the database, run ``work`` (it starts while the database goes away) and page
    loads, start the database again after ``DOWN`` seconds; what ``work`` returned."""
    done = asyncio.Event()
    loading = asyncio.create_task(pages.until(done))
    working = asyncio.create_task(work())
    try:
        await asyncio.to_thread(pg.stop)
        await asyncio.sleep(DOWN)  # the length of the outage, not a synchronisation
        await asyncio.to_thread(pg.start)
        return await asyncio.wait_for(working, 60)
    finally:
        done.set()
        await loading


async def pay(http: aiohttp.ClientSession, url: str) -> str:
    """Fill the payment page as a person would: on a 503, wait as it says and try again."""
    for _ in range(20):
        async with http.get(url) as page:
            if page.status == 503:
                await asyncio.sleep(float(page.headers.get("Retry-After", "1")))
                continue
            assert page.status == 200, (await page.text())[:500]
            html = await page.text()
            cookie = page.cookies["csrftoken"].value
        token = html.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]
        async with http.post(
            url,
            data={**TEST_CARD, "csrfmiddlewaretoken": token},
            headers={"Cookie": f"csrftoken={cookie}"},
        ) as done:
            if done.status == 503:
                await asyncio.sleep(float(done.headers.get("Retry-After", "1")))
                continue
            text = await done.text()
            assert done.status == 200, text[:500]
            return text
    raise AssertionError(f"the payment page at {url} never came back")


def on_record(pg: PrivatePostgres, call_id: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(pg.url.replace("postgres://", "postgresql://")) as db:
        status, result = db.execute(
            "SELECT status, result FROM chatbridge_chat_toolsession WHERE id = %s", (call_id,)
        ).fetchone()
        journal = db.execute(
            "SELECT seq, kind, key, result FROM chatbridge_chat_journalrecord "
            "WHERE session_id = %s AND answered_at IS NOT NULL ORDER BY seq",
            (call_id,),
        ).fetchall()
        messages = db.execute(
            "SELECT content FROM chatbridge_chat_message WHERE tool_call_id = %s", (call_id,)
        ).fetchall()
    return {
        "status": status,
        "result": result,
        "journal": [(kind, key) for _, kind, key, _ in journal],
        "tickets": [r for _, kind, _, r in journal if kind == "step"],
        "tool_messages": [json.loads(c) if c.startswith("{") else c for (c,) in messages],
    }


@pytest.mark.timeout(300)
async def test_postgres_restarts_under_load_lose_no_booking_and_pages_get_503(
    pg: PrivatePostgres, server: Server
) -> None:
    base = server.base
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        chats = [await RemoteChat.open(http, base) for _ in range(BOOKINGS)]
        for chat in chats:
            await chat.connect(base)
        to_seat = await asyncio.gather(*(chat.book_to_seat(timeout=60) for chat in chats))
        pages = PageLoads(http, base, chats[0])

        async def answer_seats() -> list[dict[str, Any]]:
            async def one(chat: RemoteChat, flight_id: str, seats: dict[str, Any]) -> Any:
                await chat.answer(seats, seat_label=seat_map_for(flight_id).first_free())
                return await next_step(chat, "elicit", key="review")

            return await each([one(c, *s) for c, s in zip(chats, to_seat, strict=True)])

        async def confirm(reviews: list[dict[str, Any]]) -> list[dict[str, Any]]:
            async def one(chat: RemoteChat, review: dict[str, Any]) -> Any:
                await chat.answer(review, confirm=True)
                return await next_step(chat, "elicit", key="payment")

            return await each([one(c, r) for c, r in zip(chats, reviews, strict=True)])

        async def pay_all(payments: list[dict[str, Any]]) -> list[dict[str, Any]]:
            async def one(chat: RemoteChat, payment: dict[str, Any]) -> Any:
                await pay(http, payment["url"])
                finished = await next_step(chat, "tool_call", status="completed")
                # Its result is on record as the tool message before the turn is done.
                await next_step(chat, "conversation_state", phase="done")
                return finished

            return await each([one(c, p) for c, p in zip(chats, payments, strict=True)])

        # Each step of every booking is taken while the database restarts under it.
        reviews = await restart_under(pg, pages, answer_seats)
        payments = await restart_under(pg, pages, lambda: confirm(reviews))
        done = await restart_under(pg, pages, lambda: pay_all(payments))
        for chat in chats:
            await chat.close()

    log = server.log.read_text(errors="replace")
    failed = [e for chat in chats for e in chat.events if e["type"] == "error"]
    assert failed == [], (failed, log[-3000:])
    lost = []
    for (flight_id, seats), finished in zip(to_seat, done, strict=True):
        record = on_record(pg, seats["call_id"])
        label = seat_map_for(flight_id).first_free()
        assert (finished["result"]["booked"], finished["result"]["seat"]) == (True, label)
        if record["status"] != "completed" or len(record["tickets"]) != 1:
            lost.append(record)
        assert record["journal"] == [
            ("elicit", "pick_flight"),
            ("elicit", "pick_seat"),
            ("elicit", "review"),
            ("elicit", "payment"),
            ("step", "issue_ticket"),  # paid: the ticket first
            ("sample", "sample"),
        ], record
        assert record["tool_messages"] == [finished["result"]]  # one result, on record once
        assert record["result"]["ticket"] == finished["result"]["ticket"]
    assert lost == []

    statuses = sorted({status for status, _, _ in pages.seen})
    assert set(statuses) <= {200, 302, 503}, [s for s in pages.seen if s[0] not in (200, 302)]
    unavailable = [s for s in pages.seen if s[0] == 503]
    assert unavailable, "no page was asked for while the database was away"
    assert all(retry and retry.isdigit() for _, retry, _ in unavailable), unavailable
    assert "Internal Server Error" not in log
