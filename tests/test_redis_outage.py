"""Redis stopped and started again under workers serving chat sockets: the sockets stay open,
answers sent meanwhile are carried out, a page loaded meanwhile connects, and a payment made
on a worker that does not hold the call while Redis is down reaches the call (it is on record;
Redis only wakes the holder)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import aiohttp
import pytest

from plugins.book_flight.data import seat_map_for
from tests.chat_http import RemoteChat, on_server, pay_over_http
from tests.servers import free_port, start_each, start_uvicorn, stop
from tests.test_worker_faults import OwnRedis, cluster_rows, own_redis

pytestmark = [pytest.mark.services, pytest.mark.slow]

__all__ = ["own_redis"]  # the fixture, used here


@pytest.fixture
def worker(own_redis: OwnRedis, tmp_path: object) -> Iterator[tuple[str, dict[str, str]]]:
    """One uvicorn worker on a fresh PostgreSQL database and the test's own Redis."""
    from tests.test_scale_out import cluster_database

    with cluster_database(own_redis.url) as env:
        port = free_port()
        proc = start_uvicorn(port, env)
        try:
            yield f"http://127.0.0.1:{port}", env
        finally:
            stop(proc)


@pytest.mark.timeout(120)
async def test_a_redis_outage_closes_no_socket_and_drops_no_answer(
    own_redis: OwnRedis, worker: tuple[str, dict[str, str]]
) -> None:
    base, env = worker
    async with aiohttp.ClientSession() as http:
        chat = await RemoteChat.open(http, base)
        await chat.connect(base)
        flight_id, seats = await chat.book_to_seat()

        own_redis.kill()  # groups, channels and connections are gone with it
        label = seat_map_for(flight_id).first_free()
        await chat.answer(seats, seat_label=label)  # on the socket opened before the outage
        review = await chat.next("elicit", key="review")
        # A page loaded meanwhile connects and shows the open question.
        reloaded = RemoteChat(http, chat.cookie, chat.conversation_id)
        await reloaded.connect(base)
        again = await reloaded.next("elicit", key="review")
        assert again["elicit_id"] == review["elicit_id"]

        own_redis.start()  # empty: it knows no group any more
        await chat.answer(review, confirm=True)
        await reloaded.next("elicit", key="payment")  # both sockets still get the events
        payment = await chat.next("elicit", key="payment")
        await pay_over_http(http, payment["url"])
        done = await chat.next("tool_call", status="completed", timeout=30)
        assert (done["result"]["booked"], done["result"]["seat"]) == (True, label)
        await reloaded.next("tool_call", status="completed", timeout=30)
        # The turn goes on past the tool's card: its result is on record as the tool message
        # before the model's reply, and the turn is done after that.
        await chat.next("conversation_state", phase="done", timeout=30)
        errors = [e for c in (chat, reloaded) for e in c.events if e["type"] == "error"]
        assert errors == []
        for client in (chat, reloaded):
            assert client.socket is not None and not client.socket.closed
            await client.close()

    rows = cluster_rows(env, seats["call_id"])
    assert rows["status"] == "completed"
    [ticket] = rows["steps"]  # issued once
    assert done["result"]["ticket"] in json.dumps(ticket)
    assert rows["tool_messages"] == [done["result"]]


RECHECK = 1.0  # the workers' CHATBRIDGE_RECHECK_SECONDS (a lost wake-up delays by at most this)


@pytest.fixture
def two_workers(own_redis: OwnRedis) -> Iterator[tuple[list[str], dict[str, str]]]:
    """Two uvicorn workers on one fresh PostgreSQL database and the test's own Redis."""
    from tests.test_scale_out import cluster_database

    with cluster_database(own_redis.url) as env:
        env["CHATBRIDGE_RECHECK_SECONDS"] = str(RECHECK)
        ports = [free_port(), free_port()]
        procs = start_each(*(lambda p=p: start_uvicorn(p, env) for p in ports))
        try:
            yield [f"http://127.0.0.1:{p}" for p in ports], env
        finally:
            for proc in procs:
                stop(proc)


@pytest.mark.timeout(120)
async def test_a_payment_made_while_redis_is_down_on_another_worker_reaches_its_call(
    own_redis: OwnRedis, two_workers: tuple[list[str], dict[str, str]]
) -> None:
    (holder, other), env = two_workers
    async with aiohttp.ClientSession() as http:
        chat = await RemoteChat.open(http, holder)
        await chat.connect(holder)
        flight_id, seats = await chat.book_to_seat()
        await chat.answer(seats, seat_label=seat_map_for(flight_id).first_free())
        review = await chat.next("elicit", key="review")
        await chat.answer(review, confirm=True)
        payment = await chat.next("elicit", key="payment")

        own_redis.kill()  # the other worker cannot wake the holder now
        done_page = await pay_over_http(http, on_server(payment["url"], other))
        assert "Payment received" in done_page  # true: it is on record
        # Redis stays down: the holder finds the answer on record by itself.
        done = await chat.next("tool_call", status="completed", timeout=RECHECK + 20)
        assert done["result"]["booked"] is True
        await chat.close()
        own_redis.start()

    rows = cluster_rows(env, seats["call_id"])
    assert rows["status"] == "completed"
    [ticket] = rows["steps"]  # issued once
    assert done["result"]["ticket"] in json.dumps(ticket)
