"""Many people at once on one production worker: nothing lost on SQLite, connections bounded on
PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from plugins.book_flight.data import seat_map_for
from tests.chat_http import RemoteChat
from tests.production import Production, production_env, start_production
from tests.servers import ONE_ADDRESS, stop
from tests.test_services import PG_HOST, PG_PORT, require

BOOK = "Book a flight from JFK to LAX"
PEOPLE = 200


async def book(http: aiohttp.ClientSession, base: str) -> RemoteChat:
    """One person opens the chat and books a flight; returns their chat once the assistant has
    replied. Everyone at once: page loads write sessions while turns write messages."""
    chat = await RemoteChat.open(http, base)
    await chat.connect(base)
    await chat.send({"type": "user_message", "text": BOOK})
    flights = await chat.next("elicit", timeout=120, key="pick_flight")
    flight_id = flights["context"]["flights"][0]["id"]
    await chat.answer(flights, flight_id=flight_id)
    seats = await chat.next("elicit", timeout=120, key="pick_seat")
    label = seat_map_for(flight_id).first_free()
    await chat.answer(seats, seat_label=label)
    await chat.review_and_pay(timeout=120)
    done = await chat.next("tool_call", timeout=120, status="completed")
    assert done["result"]["booked"] is True
    reply = await chat.next("assistant_message", timeout=120)
    assert done["result"]["ticket"] in reply["content"]
    await chat.close()
    chat.events.append({"type": "ticket", "ticket": done["result"]["ticket"]})
    return chat


@pytest.fixture
def sqlite_server(tmp_path: Path) -> Iterator[Production]:
    # 200 people, here all from 127.0.0.1: the caps per client address would see one.
    server = start_production(tmp_path, production_env(tmp_path, **ONE_ADDRESS))
    try:
        yield server
    finally:
        stop(server.proc)


@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_200_people_booking_at_once_on_sqlite_lose_nothing(
    sqlite_server: Production, tmp_path: Path
) -> None:
    base = sqlite_server.url
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        chats = await asyncio.gather(*(book(http, base) for _ in range(PEOPLE)))
    # What each person sees when they come back to the page: a new visit, on a connection of
    # its own (the bookings' idle keep-alive connections are closed by the server after 5 s,
    # and aiohttp may reuse one just as it is closed: "connection reset by peer").
    async with aiohttp.ClientSession() as http:
        for chat in chats:
            async with http.get(
                f"{base}/c/{chat.conversation_id}/", headers={"Cookie": f"sessionid={chat.cookie}"}
            ) as response:
                assert response.status == 200
                page = await response.text()
            assert BOOK in page and chat.events[-1]["ticket"] in page
    with sqlite3.connect(tmp_path / "db.sqlite3") as db:
        roles = dict(db.execute("SELECT role, COUNT(*) FROM chatbridge_chat_message GROUP BY role"))
    assert roles["user"] == PEOPLE and roles["assistant"] >= 2 * PEOPLE
    assert "database is locked" not in sqlite_server.output()


# -- PostgreSQL ---------------------------------------------------------------------------------


@pytest.fixture
def postgres_server(tmp_path: Path) -> Iterator[tuple[Production, str]]:
    require("PostgreSQL", PG_HOST, PG_PORT)
    import psycopg

    name = f"chatbridge_pool_{uuid.uuid4().hex[:10]}"
    admin = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    env = production_env(
        tmp_path,
        DATABASE_URL=f"postgres://postgres@{PG_HOST}:{PG_PORT}/{name}",
        DATABASE_POOL_SIZE="8",
        # Here every request waits its turn for a connection: 200 at once on a busy 2-core
        # machine queued one past the default 10 s (a 503, as designed). What is checked is
        # that the pool bounds the connections, not how long the queue takes.
        DATABASE_POOL_TIMEOUT="120",
    )
    server = start_production(tmp_path, env)
    try:
        yield server, name
    finally:
        stop(server.proc)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def connections_to(database: str) -> int:
    import psycopg

    admin = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.services
@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_200_concurrent_page_loads_keep_postgresql_connections_bounded(
    postgres_server: tuple[Production, str],
) -> None:
    server, database = postgres_server

    async def visit() -> int:
        async with (
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as person,
            person.get(f"{server.url}/") as page,  # a session, a conversation, its page
        ):
            await page.read()
            return page.status

    statuses = await asyncio.gather(*(visit() for _ in range(PEOPLE)))
    assert statuses == [200] * PEOPLE
    # The pool holds at most DATABASE_POOL_SIZE; a persistent connection per served request
    # left one per concurrent request before.
    assert connections_to(database) <= 8
    assert "too many clients" not in server.output()
