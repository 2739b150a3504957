"""A dead holder is noticed at once (DESIGN §11: leases expire): after kill -9 of the worker
holding a call, the next request for it, on another worker, takes the call over from its
journal and answers, within a few seconds, never after a relay's timeout with -32603 (the
official Python SDK and ext-tasks do not retry that, so the person would see a failed
booking).

The killed worker is left unreaped (a zombie) until the test ends: its process still "exists"
and its heartbeat is fresh, as a worker on another machine would look for its heartbeat's
lifetime; that is what made the next request wait for the dead worker's answer.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp import Client

from tests.servers import free_port, start_each, start_uvicorn, stop
from tests.test_mcp import FLIGHTS, ROUTE, Person, free_seat
from tests.test_mcp_sessions import MODERN, at_seat_question, retry, seat_answer
from tests.test_mcp_tasks import TRIP, McpClient, question, trip_answer
from tests.test_worker_faults import OwnRedis, cluster_rows, own_redis

pytestmark = [pytest.mark.services, pytest.mark.slow]

__all__ = ["own_redis"]  # the fixture, used here

BOUND = 5.0  # seconds the request after the kill may take


@pytest.fixture
def two_workers(own_redis: OwnRedis) -> Iterator[tuple[list[str], list[Any], dict[str, str]]]:
    """Two uvicorn workers on one fresh PostgreSQL database and the test's own Redis, serving
    plan_trip too (a task with a step)."""
    from tests.test_scale_out import cluster_database

    with cluster_database(own_redis.url) as base:
        env = {**base, "DJANGO_SETTINGS_MODULE": "tests.tasks_settings"}
        ports = [free_port(), free_port()]
        procs = start_each(*(lambda p=p: start_uvicorn(p, env) for p in ports))
        try:
            yield [f"http://127.0.0.1:{p}" for p in ports], procs, env
        finally:
            for proc in procs:
                stop(proc)


def killed(proc: subprocess.Popen[bytes]) -> None:
    """kill -9, not reaped (see the module docstring)."""
    proc.send_signal(signal.SIGKILL)


def holder_of(procs: list[Any], env: dict[str, str], call_id: str) -> subprocess.Popen[bytes]:
    worker = cluster_rows(env, call_id)["worker"]
    [proc] = [p for p in procs if worker.endswith(f":{p.pid}")]
    return proc


@pytest.mark.timeout(120)
async def test_a_task_whose_holder_was_killed_is_taken_over_by_the_next_request(
    two_workers: tuple[list[str], list[Any], dict[str, str]],
) -> None:
    (url_a, url_b), procs, env = two_workers
    async with httpx.AsyncClient() as http:
        on_a, on_b = McpClient(http, f"{url_a}/mcp"), McpClient(http, f"{url_b}/mcp")
        task_id = (await on_a.call("plan_trip", TRIP))["taskId"]
        key, asked, _ = question(await on_a.settled(task_id))
        assert asked == "pick_hotel"
        holder = holder_of(procs, env, task_id)
        other = on_b if holder is procs[0] else on_a
        killed(holder)
        started = time.monotonic()
        resumed = await other.get(task_id)
        took = time.monotonic() - started
        assert question(resumed)[:2] == (key, "pick_hotel")  # the same question, same key
        assert took < BOUND, f"the request after the kill took {took:.1f} s"
        await other.update(task_id, {key: trip_answer("pick_hotel")})
        for name in ("confirm", "rate"):
            key, asked, _ = question(await other.settled(task_id))
            assert asked == name
            await other.update(task_id, {key: trip_answer(name)})
        done = await other.settled(task_id)
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"]["booked"] is True


@pytest.mark.timeout(120)
async def test_a_2026_07_28_call_whose_holder_was_killed_is_taken_over_by_the_next_round(
    two_workers: tuple[list[str], list[Any], dict[str, str]],
) -> None:
    (url_a, url_b), procs, env = two_workers
    async with Client(f"{url_a}/mcp", mode=MODERN, elicitation_callback=Person()) as client_a:
        seat_key, state = await at_seat_question(client_a)
    # The call is held by the worker that served its rounds; the client's next round
    # reaches the other one (a balancer's round robin).
    async with (
        Client(f"{url_b}/mcp", mode=MODERN, elicitation_callback=Person()) as client_b,
        Client(f"{url_a}/mcp", mode=MODERN, elicitation_callback=Person()) as client_a,
    ):
        rows = _calls(env)
        [call_id] = [c for c, transport in rows if transport == "mcp-mrtr"]
        holder = holder_of(procs, env, call_id)
        other = client_b if holder is procs[0] else client_a
        killed(holder)
        started = time.monotonic()
        review = await retry(other, state, seat_answer(seat_key, free_seat(FLIGHTS[0].id)))
        took = time.monotonic() - started
    assert isinstance(review, types.InputRequiredResult), review  # the next question
    [(_, request)] = review.input_requests.items()
    assert "price_usd" in str(request)
    assert took < BOUND, f"the round after the kill took {took:.1f} s"
    assert ROUTE["origin"] in str(request)


def _calls(env: dict[str, str]) -> list[tuple[str, str]]:
    import psycopg

    with psycopg.connect(env["DATABASE_URL"].replace("postgres://", "postgresql://")) as db:
        return db.execute(
            "SELECT id, transport FROM chatbridge_chat_toolsession WHERE status IN "
            "('running', 'awaiting_elicit', 'awaiting_sample')"
        ).fetchall()


@pytest.mark.timeout(120)
async def test_after_a_redis_restart_the_next_round_reaches_its_live_holder(
    own_redis: OwnRedis, two_workers: tuple[list[str], list[Any], dict[str, str]]
) -> None:
    """Redis restarted: every pooled connection of both workers is dead and the holder's
    listener is not in its group until it joins again. The next round, on the other worker,
    is routed to the holder all the same (its message sent again until acknowledged, its
    reply retried on a fresh connection), instead of failing with -32603 after 30 s."""
    (url_a, url_b), procs, env = two_workers
    async with Client(f"{url_a}/mcp", mode=MODERN, elicitation_callback=Person()) as client_a:
        seat_key, state = await at_seat_question(client_a)
    [call_id] = [c for c, transport in _calls(env) if transport == "mcp-mrtr"]
    holder = holder_of(procs, env, call_id)
    held_by = cluster_rows(env, call_id)["worker"]
    other_url = url_b if holder is procs[0] else url_a
    own_redis.kill()
    own_redis.start()  # empty, and every connection to the old one is dead
    async with Client(f"{other_url}/mcp", mode=MODERN, elicitation_callback=Person()) as other:
        started = time.monotonic()
        review = await retry(other, state, seat_answer(seat_key, free_seat(FLIGHTS[0].id)))
        took = time.monotonic() - started
    assert isinstance(review, types.InputRequiredResult), review
    assert "price_usd" in str(review.input_requests)
    assert took < BOUND, f"the round after the restart took {took:.1f} s"
    assert cluster_rows(env, call_id)["worker"] == held_by  # served by its live holder
