"""Faults of a cluster, with real processes (issue 27): a worker stopped as Redis stops, or while
Redis is down (``compose down``, a lost node), exits within 5 seconds and parks the call it
held, on record, for a worker to resume; PostgreSQL cut off for a few seconds mid-booking
(every connection reset, new ones refused) books once, and the workers go on serving."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import urlsplit

import aiohttp
import mcp_types as types
import pytest
from mcp import Client

from chatbridge.author.model_context import extract_context
from plugins.book_flight.data import seat_map_for
from tests.chat_http import TEST_CARD, RemoteChat
from tests.servers import free_port, start_each, start_uvicorn, stop
from tests.tcp_proxy import TcpProxy, tcp_proxy
from tests.test_lifecycle import EXIT_LIMIT, terminate
from tests.test_mcp import ROUTE, Person
from tests.test_services import PG_HOST, PG_PORT
from tests.test_worker_faults import OwnRedis, cluster, cluster_rows, own_redis  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.services]


class Output:
    """A server's output (``subprocess.PIPE``), read line by line as it comes, by a thread."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        with stream:  # closed at its end: the server has exited
            for line in stream:
                with self._changed:
                    self.lines.append(line.decode(errors="replace"))
                    self._changed.notify_all()

    def _says(self, text: str, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: any(text in s for s in self.lines), timeout)

    async def says(self, text: str, timeout: float = 20) -> None:
        """Wait until the server writes ``text`` (what it has seen, in its own words)."""
        assert await asyncio.to_thread(self._says, text, timeout), f"never said {text!r}"

    def all(self) -> str:
        """Everything the server wrote (once it has exited)."""
        self._reader.join(timeout=10)
        return "".join(self.lines)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("when", ["as Redis stops", "while Redis is down", "Redis stops next"])
async def test_a_worker_stopped_as_redis_goes_exits_and_parks_its_call(
    when: str,
    own_redis: OwnRedis,  # noqa: F811
    cluster: dict[str, str],  # noqa: F811
) -> None:
    port = free_port()
    proc = start_uvicorn(port, cluster, log=subprocess.PIPE)
    output = Output(proc)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            chat = await RemoteChat.open(http, base)
            await chat.connect(base)
            _, seats = await chat.book_to_seat()  # the worker holds the call, a question open
            if when == "Redis stops next":  # SIGTERM first, Redis gone a moment later
                took = terminate(proc, then=own_redis.kill)
            else:
                own_redis.kill()
                if when == "while Redis is down":
                    await output.says("worker listener stopped")  # the worker has seen it go
                took = terminate(proc)
            await chat.close()
    finally:
        if proc.poll() is None:
            stop(proc)
    assert took <= EXIT_LIMIT, f"the worker took {took:.1f} s to exit after SIGTERM"
    row = cluster_rows(cluster, seats["call_id"])
    assert (row["status"], row["steps"]) == ("awaiting_elicit", [])  # parked, nothing paid
    assert "parked 1 live tool call" in output.all()


# -- PostgreSQL cut off under two workers ------------------------------------------------------

OUTAGE = 4.0  # seconds PostgreSQL stays cut off (a failover, a lost link): shorter than
# CHATBRIDGE_DB_RETRY_SECONDS (30), so what waits for the database goes on once it is back.


@dataclass
class CutOffSite:
    """Two uvicorn workers reaching PostgreSQL through a proxy the test cuts."""

    proxy: TcpProxy
    env: dict[str, str]  # the database itself, to read what is on record
    procs: list[subprocess.Popen[bytes]]
    outputs: list[Output]
    bases: list[str]
    back: asyncio.Event = field(default_factory=asyncio.Event)  # reachable again after a cut

    def cut(self) -> asyncio.Task[None]:
        """Cut PostgreSQL off now; the task lets it through again ``OUTAGE`` seconds later."""
        self.proxy.cut()
        return asyncio.create_task(self._restore())

    async def _restore(self) -> None:
        await asyncio.sleep(OUTAGE)  # the fault's length, not a synchronisation
        self.proxy.restore()
        self.back.set()

    def stop(self) -> list[str]:
        """Stop the workers (they write what they had queued); what each wrote."""
        for proc in self.procs:
            if proc.poll() is None:
                stop(proc)
        return [output.all() for output in self.outputs]


@pytest.fixture
def cut_off_site(cluster: dict[str, str]) -> Iterator[CutOffSite]:  # noqa: F811
    with tcp_proxy(PG_HOST, int(PG_PORT)) as proxy:
        env = {**cluster, "DATABASE_URL": through(cluster["DATABASE_URL"], proxy)}
        start = functools.partial(start_uvicorn, env=env, log=subprocess.PIPE)
        ports = free_port(), free_port()
        procs = start_each(*(functools.partial(start, port) for port in ports))
        site = CutOffSite(
            proxy,
            cluster,
            procs,
            [Output(p) for p in procs],
            [f"http://127.0.0.1:{p}" for p in ports],
        )
        try:
            yield site
        finally:
            site.stop()


def through(database_url: str, proxy: TcpProxy) -> str:
    """``database_url`` reaching its server through ``proxy``."""
    parts = urlsplit(database_url)
    user = f"{parts.username}@" if parts.username else ""
    return parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}").geturl()


async def pay_when_back(http: aiohttp.ClientSession, url: str, back: asyncio.Event) -> None:
    """Pay on the page at ``url`` as a person would: a 503 (the database is away) is tried
    again once the database is back, as the page does by itself."""
    while True:
        async with http.get(url) as page:
            html = await page.text()
            status = page.status
            cookie = page.cookies["csrftoken"].value if status == 200 else ""
        if status == 200:
            token = html.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]
            async with http.post(
                url,
                data={**TEST_CARD, "csrfmiddlewaretoken": token},
                headers={"Cookie": f"csrftoken={cookie}"},
            ) as done:
                status, html = done.status, await done.text()
            if status == 200:
                return
        assert status == 503, (status, html[:500])
        await back.wait()


def calls_on_record(env: dict[str, str]) -> list[str]:
    """The ids of every book_flight call in the database."""
    import psycopg

    with psycopg.connect(env["DATABASE_URL"].replace("postgres://", "postgresql://")) as db:
        rows = db.execute(
            "SELECT id FROM chatbridge_chat_toolsession WHERE tool_name = %s", ["book_flight"]
        )
        return [call_id for (call_id,) in rows.fetchall()]


def live_on_record(env: dict[str, str]) -> dict[str, list[Any]]:
    """What the database holds as still going: active calls, conversations' turns held."""
    import psycopg

    url = env["DATABASE_URL"].replace("postgres://", "postgresql://")
    with psycopg.connect(url) as db:
        calls = db.execute(
            "SELECT id, status FROM chatbridge_chat_toolsession WHERE status IN "
            "('running', 'awaiting_elicit', 'awaiting_sample')"
        ).fetchall()
        turns = db.execute(
            "SELECT id, turn_worker FROM chatbridge_chat_conversation "
            "WHERE turn_worker <> '' AND turn_expires > now()"
        ).fetchall()
    return {"calls": calls, "turns": turns}


async def a_fresh_booking_starts_and_stops(http: aiohttp.ClientSession, base: str) -> None:
    """A new visitor on ``base`` starts a booking (written to the database) and aborts it."""
    chat = await RemoteChat.open(http, base)
    await chat.connect(base)
    await chat.send({"type": "user_message", "text": "Book a flight from JFK to LAX"})
    flights = await chat.next("elicit", key="pick_flight")
    await chat.send({"type": "abort", "session_id": flights["session_id"], "reason": "looking"})
    await chat.next("tool_call", status="aborted")
    await chat.next("conversation_state", phase="done", running=False)
    await chat.close()


def assert_booked_once(site: CutOffSite, call_id: str, result: dict[str, Any]) -> None:
    """Once the workers stopped: the call completed on the worker that began it, with one
    ticket, one result, and nothing left going; neither worker failed with a traceback."""
    logs = site.stop()
    assert live_on_record(site.env) == {"calls": [], "turns": []}, logs
    rows = cluster_rows(site.env, call_id)
    assert (rows["status"], rows["resumes"]) == ("completed", 0), logs  # never taken over
    assert rows["worker"].endswith(f":{site.procs[0].pid}")
    [ticket] = rows["steps"]  # issued once
    assert result["ticket"] in str(ticket)
    assert rows["result"]["ticket"] == result["ticket"]
    assert rows["tool_messages"] in ([], [result])  # an MCP call has no chat message
    assert "the database is unavailable" in logs[0], logs[0]  # the holder met the outage
    assert not any("Traceback" in log for log in logs), logs


@pytest.mark.timeout(180)
@pytest.mark.parametrize("when", ["as the user confirms", "as the user pays", "as it is paid"])
async def test_postgres_cut_off_mid_booking_books_once_and_the_workers_go_on(
    when: str, cut_off_site: CutOffSite
) -> None:
    """The chat on worker A, the same conversation open on worker B (which hands answers to
    A): PostgreSQL is cut off as the review is confirmed on B, as the card is sent on the
    payment page, or as the page has taken it (the ticket is being issued)."""
    site, (base_a, base_b) = cut_off_site, cut_off_site.bases
    async with aiohttp.ClientSession() as http:
        chat = await RemoteChat.open(http, base_a)
        await chat.connect(base_a)
        flight_id, seats = await chat.book_to_seat()  # worker A holds the call
        label = seat_map_for(flight_id).first_free()
        await chat.answer(seats, seat_label=label)
        review = await chat.next("elicit", key="review")
        on_b = RemoteChat(http, chat.cookie, chat.conversation_id)
        await on_b.connect(base_b)
        await on_b.next("elicit", key="review")

        if when == "as the user confirms":
            restored = site.cut()
            await on_b.answer(review, confirm=True)  # waits for the database, on B then A
            payment = await on_b.next("elicit", key="payment", timeout=60)
            await pay_when_back(http, payment["url"], site.back)
        else:
            await on_b.answer(review, confirm=True)
            payment = await on_b.next("elicit", key="payment")
            if when == "as the user pays":
                restored = site.cut()
                await pay_when_back(http, payment["url"], site.back)
            else:
                await pay_when_back(http, payment["url"], site.back)
                restored = site.cut()
        await restored
        done = await on_b.next("tool_call", status="completed", timeout=60)
        assert (done["result"]["booked"], done["result"]["seat"]) == (True, label)
        reply = await on_b.next("assistant_message", timeout=30)
        assert done["result"]["ticket"] in reply["content"]
        await chat.next("tool_call", status="completed", timeout=30)  # A's socket too
        await on_b.next("conversation_state", phase="done", running=False)
        assert [e for e in on_b.events + chat.events if e["type"] == "error"] == []

        # Both workers came through: alive, and serving a new booking each.
        assert [proc.poll() for proc in site.procs] == [None, None]
        for base in site.bases:
            await a_fresh_booking_starts_and_stops(http, base)
        for client in (chat, on_b):
            await client.close()
    assert_booked_once(site, seats["call_id"], done["result"])


class CutAtReview(Person):
    """The official client's person, who confirms the review just as PostgreSQL is cut off."""

    def __init__(self, site: CutOffSite) -> None:
        super().__init__()
        self.site = site
        self.restored: asyncio.Task[None] | None = None

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        if params.mode != "url" and "price_usd" in extract_context(
            params.requested_schema, params.message
        ):
            self.restored = self.site.cut()
        return await super().__call__(context, params)


@pytest.mark.timeout(180)
async def test_postgres_cut_off_as_an_mcp_client_answers_books_once(
    cut_off_site: CutOffSite,
) -> None:
    """The official Python client (legacy sessions) on worker A: its answer to the review
    arrives while PostgreSQL is cut off, and waits for it."""
    person = CutAtReview(cut_off_site)
    base_a = cut_off_site.bases[0]
    async with Client(f"{base_a}/mcp", mode="legacy", elicitation_callback=person) as client:
        done = await client.call_tool("book_flight", ROUTE)
        assert person.restored is not None, "the review was never asked"
        await person.restored
        [call_id] = calls_on_record(cut_off_site.env)  # begun before its question
        async with aiohttp.ClientSession() as http:
            for base in cut_off_site.bases:
                await a_fresh_booking_starts_and_stops(http, base)
    assert not done.is_error, done
    booked = done.structured_content
    assert booked is not None and booked["booked"] is True
    assert_booked_once(cut_off_site, call_id, booked)
