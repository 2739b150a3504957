"""Two daphne workers on real Redis and PostgreSQL: routing, takeover, admin across workers."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
import pytest

from plugins.book_flight.data import seat_map_for
from tests.chat_http import RemoteChat
from tests.servers import free_port, postgres_copy, start_daphne, stop
from tests.test_services import PG_HOST, PG_PORT, REDIS_HOST, REDIS_PORT, require

pytestmark = [pytest.mark.services, pytest.mark.slow]

BOOK = {"type": "user_message", "text": "Book a flight from JFK to LAX"}


@pytest.fixture
def cluster_env() -> Iterator[dict[str, str]]:
    """A fresh PostgreSQL database, a private prefix on the shared Redis, a staff user."""
    require("Redis", REDIS_HOST, REDIS_PORT)
    with cluster_database(f"redis://{REDIS_HOST}:{REDIS_PORT}/0") as env:
        yield env


@contextmanager
def cluster_database(redis_url: str) -> Iterator[dict[str, str]]:
    """The environment of workers on a fresh PostgreSQL database (migrated, with a staff
    user) and ``redis_url`` under a private prefix; the database is dropped afterwards."""
    require("PostgreSQL", PG_HOST, PG_PORT)
    import psycopg

    name = f"chatbridge_cluster_{uuid.uuid4().hex[:10]}"
    admin = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/postgres"
    postgres_copy(name, PG_HOST, PG_PORT)  # migrated, with the staff user ops
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatbridge.settings",
        "DATABASE_URL": f"postgres://postgres@{PG_HOST}:{PG_PORT}/{name}",
        "REDIS_URL": redis_url,
        "CHATBRIDGE_REDIS_PREFIX": f"cbtest{uuid.uuid4().hex[:8]}",
        "DJANGO_SUPERUSER_PASSWORD": "pw-123456",
        # The burst of 150 sockets below is one browser's (30 is the default cap).
        "CHATBRIDGE_SOCKETS_PER_VISITOR": "200",
    }
    try:
        yield env
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def staff_page(http: aiohttp.ClientSession, base: str, path: str) -> str:
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as staff:
        async with staff.get(f"{base}/admin/login/") as page:
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', await page.text())
        assert token is not None
        form = {
            "username": "ops",
            "password": "pw-123456",
            "csrfmiddlewaretoken": token.group(1),
            "next": path,
        }
        async with staff.post(
            f"{base}/admin/login/?next={path}",
            data=form,
            headers={"Referer": f"{base}/admin/login/"},
        ) as response:
            assert response.status == 200
            return await response.text()


@pytest.mark.timeout(180)  # two server starts: ~40 s with both cores busy, 60+ in the suite
async def test_two_workers_route_answers_take_over_and_show_each_others_sessions(
    cluster_env: dict[str, str],
) -> None:
    ports = free_port(), free_port()
    worker_a, worker_b = (start_daphne(port, cluster_env) for port in ports)
    base_a, base_b = (f"http://127.0.0.1:{port}" for port in ports)
    try:
        async with aiohttp.ClientSession() as http:
            chat = await RemoteChat.open(http, base_a)
            await chat.connect(base_a)
            await chat.send(BOOK)
            flights = await chat.next("elicit", key="pick_flight")

            # A second browser's booking lives on worker B.
            other = await RemoteChat.open(http, base_b)
            await other.connect(base_b)
            await other.send(BOOK)
            theirs = await other.next("elicit", key="pick_flight")

            active = await staff_page(http, base_a, "/admin/chatbridge_chat/toolsession/active/")
            assert flights["session_id"] in active and theirs["session_id"] in active
            assert active.count("<h2>Worker ") == 2

            await asyncio.sleep(6)  # Redis connections idle past redis-py's 5 s default

            # The same conversation on worker B: B routes the answer to A, which holds the tool.
            on_b = RemoteChat(http, chat.cookie, chat.conversation_id)
            await on_b.connect(base_b)
            flight_id = flights["context"]["flights"][0]["id"]
            await on_b.answer(flights, flight_id=flight_id)
            seats = await on_b.next("elicit", key="pick_seat")  # from A, through Redis
            await chat.next("elicit", key="pick_seat")

            worker_a.send_signal(signal.SIGKILL)
            worker_a.wait(timeout=10)
            label = seat_map_for(flight_id).first_free()
            assert label is not None
            await on_b.answer(seats, seat_label=label)  # nobody answers for A: B takes over
            await on_b.review_and_pay(timeout=30, base=base_b)
            done = await on_b.next("tool_call", status="completed", timeout=30)
            assert done["result"]["booked"] is True and done["result"]["seat"] == label

            # A burst of 150 sockets on one worker: every one is served.
            async def connect() -> str:
                socket = await http.ws_connect(
                    f"{base_b.replace('http', 'ws')}/ws/chat/{chat.conversation_id}/?format=json",
                    headers={"Origin": base_b, "Cookie": f"sessionid={chat.cookie}"},
                )
                first = await socket.receive_json(timeout=30)
                await socket.close()
                return str(first["type"])

            kinds = await asyncio.gather(*(connect() for _ in range(150)))
            assert kinds == ["conversation_state"] * 150
            for client in (chat, on_b, other):
                await client.close()
    finally:
        for proc in (worker_a, worker_b):
            if proc.poll() is None:
                stop(proc)
