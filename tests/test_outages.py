"""The truth survives outages longer than every retry window (DESIGN §11), on a PostgreSQL
cluster of the test's own and one production server: a step's side effect happens once for
the world (the ticket office outside the server counts its tickets), the outcome is on record
and the person and the MCP client are told, within ``BOUND`` seconds of the database's return.

The server waits ``RETRY`` seconds for a database that went away (``CHATBRIDGE_DB_RETRY_SECONDS``,
30 s by default: shortened so the suite stays fast); each outage lasts longer than that, so every
write in flight fails past its retries, as in a real outage of 40 s or 120 s (``make chaos`` runs
those lengths).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from plugins.book_flight.data import seat_map_for
from tests.chat_http import RemoteChat
from tests.outage_plugin import TicketOffice, ticket_office
from tests.private_postgres import PrivatePostgres, private_postgres
from tests.production import production_env
from tests.servers import ROOT, free_port, start_uvicorn, stop
from tests.test_mcp_tasks import McpClient, question

pytestmark = [pytest.mark.services, pytest.mark.slow]

RETRY = 2.0  # seconds the server's writes wait for the database
DOWN = 3 * RETRY + 1  # each outage outlasts every retry window
BOUND = 20.0  # seconds after the database is back by which the person is told the outcome


@dataclass
class Server:
    base: str
    log: Path
    proc: subprocess.Popen[bytes]

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def pg() -> Iterator[PrivatePostgres]:
    with private_postgres() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def office() -> Iterator[TicketOffice]:
    with ticket_office() as books:
        yield books


@pytest.fixture(scope="module")
def site_env(
    pg: PrivatePostgres, office: TicketOffice, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """The production environment on the private cluster, serving buy_ticket, migrated."""
    tmp = tmp_path_factory.mktemp("outages")
    env = production_env(
        tmp,
        DJANGO_SETTINGS_MODULE="tests.outage_settings",
        DATABASE_URL=pg.url,
        DATABASE_POOL_TIMEOUT="2",
        CHATBRIDGE_MCP_PUBLIC="1",
        CHATBRIDGE_DB_RETRY_SECONDS=str(RETRY),
        CHATBRIDGE_COMMITMENT_SWEEP="0.5",
        TICKET_OFFICE_URL=office.url,
        DJANGO_STATIC_ROOT=str(ROOT / "staticfiles"),  # collected by the test run's start
    )
    env["OUTAGE_LOGS"] = str(tmp)
    migrate(env)
    return env


@pytest.fixture
def alone_env(pg: PrivatePostgres, site_env: dict[str, str]) -> dict[str, str]:
    """``site_env`` on a database of its own: the module's other servers (on no shared
    channel layer) cannot take the calls of the servers this test kills over."""
    import psycopg

    admin = pg.url.replace("postgres://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute("DROP DATABASE IF EXISTS alone")
        db.execute("CREATE DATABASE alone")
    env = {**site_env, "DATABASE_URL": pg.database_url("alone")}
    migrate(env)
    return env


def migrate(env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=180,
        capture_output=True,
    )


def serve(env: dict[str, str]) -> Server:
    port = free_port()
    log = Path(env["OUTAGE_LOGS"]) / f"server-{port}.log"
    return Server(f"http://127.0.0.1:{port}", log, start_uvicorn(port, env, log=log))


@pytest.fixture(scope="module")
def server(site_env: dict[str, str]) -> Iterator[Server]:
    """One production server for the module: an outage of its database is what it survives."""
    running = serve(site_env)
    try:
        yield running
    finally:
        stop(running.proc)


def on_record(pg: PrivatePostgres, call_id: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(pg.url.replace("postgres://", "postgresql://")) as db:
        status, result, error = db.execute(
            "SELECT status, result, error FROM chatbridge_chat_toolsession WHERE id = %s",
            (call_id,),
        ).fetchone()
        steps = db.execute(
            "SELECT key, result FROM chatbridge_chat_journalrecord "
            "WHERE session_id = %s AND kind = 'step' ORDER BY seq",
            (call_id,),
        ).fetchall()
    return {"status": status, "result": result, "error": error, "steps": steps}


async def outage(pg: PrivatePostgres, office: TicketOffice) -> None:
    """The database stops while the office works on a step's request (held there until the
    database is down), and stays away ``DOWN`` seconds."""
    assert await asyncio.to_thread(office.reached.wait, 30), "the step never reached the office"
    await asyncio.to_thread(pg.stop)
    office.release()  # the ticket is issued while the database is away
    await asyncio.sleep(DOWN)  # the outage's length, not a synchronisation
    await asyncio.to_thread(pg.start)


async def test_postgres_down_past_the_retry_window_mid_step_issues_one_ticket_in_the_chat(
    pg: PrivatePostgres, office: TicketOffice, server: Server
) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        chat = await RemoteChat.open(http, server.base)
        await chat.connect(server.base)
        await chat.send({"type": "user_message", "text": "Buy ticket from AMS to LIS"})
        form = await chat.next("elicit", 60, key="pay")
        office.hold()
        await chat.answer(form, card="4242424242424242")
        await outage(pg, office)
        done = await chat.next("tool_call", BOUND, status="completed")
        await chat.close()

    tickets = office.issued("AMS-LIS")
    assert len(tickets) == 1, (tickets, server.output()[-3000:])  # once for the world
    assert done["result"] == {"booked": True, "ticket": tickets[0]}  # the person is told it
    record = on_record(pg, form["call_id"])
    assert record["status"] == "completed", record
    assert record["steps"] == [("issue_ticket", {"value": tickets[0]})]


async def test_postgres_down_past_the_retry_window_mid_step_issues_one_ticket_to_a_task(
    pg: PrivatePostgres, office: TicketOffice, server: Server
) -> None:
    async with httpx.AsyncClient() as http:
        client = McpClient(http, f"{server.base}/mcp")
        task_id = (await client.call("buy_ticket", {"origin": "OSL", "destination": "RIX"}))[
            "taskId"
        ]
        key, name, _ = question(await client.settled(task_id))
        assert name == "pay"
        office.hold()
        answer = {"action": "accept", "content": {"card": "4242424242424242"}}
        assert await client.update(task_id, {key: answer}) == {"resultType": "complete"}
        await outage(pg, office)
        done = await client.settled(task_id, timeout=BOUND)

    tickets = office.issued("OSL-RIX")
    assert len(tickets) == 1, (tickets, server.output()[-3000:])
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"] == {"booked": True, "ticket": tickets[0]}
    record = on_record(pg, task_id)
    assert record["status"] == "completed", record
    assert record["steps"] == [("issue_ticket", {"value": tickets[0]})]


async def test_a_worker_killed_in_the_outage_is_finished_by_the_next_with_one_ticket(
    pg: PrivatePostgres, office: TicketOffice, site_env: dict[str, str]
) -> None:
    """The reported defect: the worker that ran the step dies while the database is away; the
    worker started after it replays the call and meets the step started, not finished."""
    first = serve(site_env)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            chat = await RemoteChat.open(http, first.base)
            await chat.connect(first.base)
            await chat.send({"type": "user_message", "text": "Buy ticket from HEL to TLL"})
            form = await chat.next("elicit", 60, key="pay")
            office.hold()
            await chat.answer(form, card="4242424242424242")
            assert await asyncio.to_thread(office.reached.wait, 30)
            await asyncio.to_thread(pg.stop)
            office.release()
            await asyncio.sleep(DOWN)  # the outage's length
            first.proc.kill()  # kill -9, with the ticket issued and not on record
            first.proc.wait()
            await asyncio.to_thread(pg.start)
            second = serve(site_env)
            try:
                record = await ended(pg, form["call_id"])
                async with http.get(
                    f"{second.base}/c/{chat.conversation_id}/",
                    headers={"Cookie": f"sessionid={chat.cookie}"},
                ) as page:
                    html = await page.text()
            finally:
                stop(second.proc)
    finally:
        stop(first.proc)

    tickets = office.issued("HEL-TLL")
    assert len(tickets) == 1, tickets  # once for the world, though two workers ran the step
    assert record["status"] == "completed", (record, second.output()[-3000:])
    assert record["steps"] == [("issue_ticket", {"value": tickets[0]})]
    assert record["result"] == {"booked": True, "ticket": tickets[0]}
    assert tickets[0] in html  # the person reloading the chat is told


async def ended(pg: PrivatePostgres, call_id: str) -> dict[str, Any]:
    """The call's record once it has ended (waiting at most ``BOUND`` seconds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOUND
    while True:
        record = await asyncio.to_thread(on_record, pg, call_id)
        if record["status"] in ("completed", "failed", "aborted") or loop.time() > deadline:
            return record
        await asyncio.sleep(0.2)  # polling the record, as an operator's page would


@pytest.mark.timeout(180)  # three server starts, each slow when the suite loads both cores
async def test_a_change_the_person_was_told_of_survives_a_kill(alone_env: dict[str, str]) -> None:
    """Change seat at the review, then kill -9: a change the person saw made (the review
    closed, the seat asked again) is on record, so the worker that resumes the call asks the
    seat; one still being written when the worker dies was not shown as made. The change's
    write is held back by a lock on the call's row (as a slow database would)."""
    import psycopg

    first = serve(alone_env)
    second: Server | None = None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            chat = await RemoteChat.open(http, first.base)
            await chat.connect(first.base)
            flight_id, seats = await chat.book_to_seat(timeout=60)
            await chat.answer(seats, seat_label=seat_map_for(flight_id).first_free())
            review = await chat.next("elicit", 30, key="review")
            url = alone_env["DATABASE_URL"].replace("postgres://", "postgresql://")
            with psycopg.connect(url) as locker:
                locker.execute(
                    "SELECT 1 FROM chatbridge_chat_toolsession WHERE id = %s FOR UPDATE",
                    (review["call_id"],),
                )
                await chat.send({**change_of(review), "change": "pick_seat"})
                await asyncio.to_thread(waiting_on_a_lock, url)
                first.proc.kill()  # its change's write held up, and then cut off
                first.proc.wait()
            told = await everything_sent(chat)
            # Not told the change was made: the review is what the next worker asks.
            assert not any(e.get("action") == "change" for e in told), told
            second = serve(alone_env)
            chat.events.clear()
            await chat.connect(second.base)
            again = await chat.next("elicit", 60)
            assert again["key"] == "review", again
            # Now the change goes through, is shown, and the worker dies right after.
            await chat.send({**change_of(again), "change": "pick_seat"})
            changed = await chat.next("elicit_complete", 30, action="change")
            second.proc.kill()
            second.proc.wait()
            assert changed["elicit_id"] == again["elicit_id"]
            third = serve(alone_env)
            try:
                chat.events.clear()
                await chat.connect(third.base)
                asked = await chat.next("elicit", 60)
                assert asked["key"] == "pick_seat", asked  # the change was on record
            finally:
                stop(third.proc)
            await chat.close()
    finally:
        stop(first.proc)
        if second is not None:
            stop(second.proc)


async def everything_sent(chat: RemoteChat) -> list[dict[str, Any]]:
    """Every event the chat's socket got, to its end (its server was killed)."""
    assert chat.socket is not None
    async with asyncio.timeout(30):
        async for message in chat.socket:
            if message.type == aiohttp.WSMsgType.TEXT:
                chat.events.append(json.loads(message.data))
    return list(chat.events)


def change_of(form: dict[str, Any]) -> dict[str, Any]:
    """The socket command that leaves ``form``'s question for an earlier one."""
    return {
        "type": "elicit_response",
        "session_id": form["session_id"],
        "call_id": form["call_id"],
        "elicit_id": form["elicit_id"],
    }


def waiting_on_a_lock(url: str, timeout: float = 30.0) -> None:
    """Return once a statement of the server waits on a row lock (the change's write)."""
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as db:
        while time.monotonic() < deadline:
            (count,) = db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchone()
            if count:
                return
            time.sleep(0.05)  # polling the server's state, not waiting for time to pass
    raise AssertionError("no write of the server ever waited on the lock")
