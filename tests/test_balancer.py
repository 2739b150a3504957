"""Through a real balancer (issue 27): HAProxy as docs/deploy.md configures it, round robin
over two uvicorn workers on PostgreSQL and Redis. Each HTTP request may reach either worker (a
chat's socket stays on one; a request for a legacy MCP session held by the other worker is
relayed to it): the balancer knows nothing of MCP, and the call is booked once."""

from __future__ import annotations

import asyncio
import functools
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from asgiref.testing import ApplicationCommunicator
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from playwright.async_api import Browser

from chatbridge.asgi import application
from chatbridge.mcp.session_relay import ACCEPT_TIMEOUT
from plugins.book_flight.data import search_flights, seat_map_for
from tests.balancer import start_haproxy
from tests.chat_http import RemoteChat
from tests.npm_clients import run_script
from tests.servers import free_port, start_each, start_uvicorn, stop
from tests.test_browser import (
    ask_for_flights,
    expect_confirmation,
    first_free,
    open_watched_chat,
    pick_first_flight,
    review_and_pay,
)
from tests.test_independent_clients import assert_booked, assert_respond_path
from tests.test_mcp import ROUTE, Person, free_seat
from tests.test_mcp_sessions import (
    MODERN,
    at_final_retry,
    at_seat_question,
    paid_after_review,
    retry,
    seat_answer,
    wait_until,
)
from tests.test_worker_faults import (  # noqa: F401 (fixtures)
    OwnRedis,
    cluster,
    cluster_rows,
    own_redis,
    wait_connect,
)


@dataclass
class Site:
    """The balancer's address, its workers' own addresses, and the cluster's environment;
    the workers log to ``folder``."""

    url: str
    workers: list[str]
    procs: list[subprocess.Popen[bytes]]
    env: dict[str, str]
    folder: Path

    def logs(self) -> dict[Path, str]:
        return {log: log.read_text() for log in sorted(self.folder.glob("worker-*.log"))}


@contextmanager
def balanced_site(env: dict[str, str], folder: Path) -> Iterator[Site]:
    """HAProxy in front of two uvicorn workers of the cluster ``env``, logging to ``folder``."""
    ports = [free_port(), free_port()]
    starts = (
        functools.partial(start_uvicorn, port, env, log=folder / f"worker-{n}.log")
        for n, port in enumerate(ports, 1)
    )
    workers = start_each(*starts)
    try:
        front = free_port()
        proxy = start_haproxy(front, ports, folder)
        try:
            addresses = [f"http://127.0.0.1:{p}" for p in ports]
            yield Site(f"http://127.0.0.1:{front}", addresses, workers, env, folder)
        finally:
            stop(proxy)
    finally:
        for worker in workers:
            stop(worker)


@pytest.fixture
def site(cluster: dict[str, str], tmp_path: Path) -> Iterator[Site]:  # noqa: F811
    """A site of the test's own, for the tests that kill a worker or Redis."""
    with balanced_site(cluster, tmp_path) as own:
        yield own


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """One site for this module's tests that stop nothing: each finds its own calls on record
    and reads only what the workers logged while it ran (``logged``)."""
    from tests.test_scale_out import cluster_database

    redis = OwnRedis()
    redis.start()
    try:
        folder = tmp_path_factory.mktemp("balanced")
        with cluster_database(redis.url) as env, balanced_site(env, folder) as one:
            yield one
    finally:
        redis.kill()


@pytest.fixture
def logged(shared: Site) -> Iterator[Callable[[], str]]:
    """What the shared site's workers log from now on (read when called)."""
    before = shared.logs()

    def since() -> str:
        return "".join(text[len(before.get(log, "")) :] for log, text in shared.logs().items())

    yield since


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(180)
async def test_a_chat_booking_through_the_balancer_is_booked_once(shared: Site) -> None:
    site = shared
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{site.url}/readyz") as ready:
            assert (ready.status, await ready.text()) == (200, "ready\n")
        chat = await RemoteChat.open(http, site.url)
        await chat.connect(site.url)
        flight_id, seats = await chat.book_to_seat()
        first, label = free_seats(flight_id)[:2]
        await chat.answer(seats, seat_label=first)
        # At the review, the person changes the seat: the question comes back, and the
        # booking goes on with the new one (whichever worker holds the call).
        review = await chat.next("elicit", key="review")
        await chat.send({**ids_of(review), "type": "elicit_response", "change": "pick_seat"})
        seats = await chat.next("elicit", key="pick_seat")
        assert seats["elicit_id"] != review["elicit_id"]
        await chat.answer(seats, seat_label=label)
        await chat.review_and_pay(base=site.url)  # the page's GET and POST: any worker
        done = await chat.next("tool_call", status="completed", timeout=30)
        assert (done["result"]["booked"], done["result"]["seat"]) == (True, label)
        reply = await chat.next("assistant_message", timeout=20)
        assert done["result"]["ticket"] in reply["content"]
        assert [e for e in chat.events if e["type"] == "error"] == []
        await chat.close()
    await issued_once(site.env, done["result"]["ticket"], seats["call_id"])


def free_seats(flight_id: str) -> list[str]:
    seat_map = seat_map_for(flight_id)
    return [s["label"] for row in seat_map.grid() for s in row["seats"] if not s["taken"]]


def ids_of(form: dict[str, Any]) -> dict[str, Any]:
    return {k: form[k] for k in ("session_id", "call_id", "elicit_id")}


async def recorded(env: dict[str, str], call_id: str) -> dict[str, Any]:
    """The call's record once it has ended there (a client hears of a call's end before the
    worker's writer has written it)."""
    rows = await asyncio.to_thread(wait_until, lambda: ended(cluster_rows(env, call_id)), 30)
    assert rows is not None, f"call {call_id} had not ended on record in 30 s"
    return rows


def ended(rows: dict[str, Any]) -> dict[str, Any] | None:
    return rows if rows["status"] not in ("running", "awaiting_elicit", "awaiting_sample") else None


async def issued_once(env: dict[str, str], ticket: str, call_id: str = "") -> dict[str, Any]:
    """The booking's call (``call_id``, or the call on record whose result names ``ticket``)
    completed, its ticket step done once and naming ``ticket``; its record."""
    if not call_id:
        call_id = await asyncio.to_thread(wait_until, lambda: call_with_ticket(env, ticket), 30)
        assert call_id, f"no call on record names the ticket {ticket}"
    rows = await recorded(env, call_id)
    assert rows["status"] == "completed"
    [step] = rows["steps"]
    assert ticket in str(step)
    return rows


def call_with_ticket(env: dict[str, str], ticket: str) -> str | None:
    """The id of the book_flight call whose result names ``ticket``, once it is on record."""
    import psycopg

    with psycopg.connect(env["DATABASE_URL"].replace("postgres://", "postgresql://")) as db:
        row = db.execute(
            "SELECT id FROM chatbridge_chat_toolsession WHERE tool_name = %s "
            "AND result ->> 'ticket' = %s",
            ("book_flight", ticket),
        ).fetchone()
    return row[0] if row is not None else None


def booked_calls(env: dict[str, str]) -> set[str]:
    """The ids of every book_flight call in the cluster's database."""
    import psycopg

    with psycopg.connect(env["DATABASE_URL"].replace("postgres://", "postgresql://")) as db:
        rows = db.execute(
            "SELECT id FROM chatbridge_chat_toolsession WHERE tool_name = %s", ("book_flight",)
        )
        return {call_id for (call_id,) in rows.fetchall()}


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(180)
async def test_a_legacy_mcp_booking_through_the_balancer_is_booked_once(
    shared: Site, logged: Callable[[], str]
) -> None:
    """The official Python client, protocol 2025-11-25: its requests alternate between the
    workers, the balancer knowing nothing of its session; those that reach the worker not
    holding it are relayed to the holder. The payment page (a URL question) is opened and
    posted through the balancer too."""
    async with Client(f"{shared.url}/mcp", mode="legacy", elicitation_callback=Person()) as client:
        done = await client.call_tool("book_flight", ROUTE)
    assert not done.is_error, done
    booked = done.structured_content
    assert booked is not None and booked["booked"] is True
    await issued_once(shared.env, booked["ticket"])
    assert relayed(logged())  # round robin sent some of the session's requests elsewhere


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(120)
async def test_a_legacy_session_whose_worker_was_killed_is_not_found_at_once(site: Site) -> None:
    """The worker holding a legacy MCP session dies (SIGKILL). The client's next request can
    only reach the worker left, which cannot serve the session: it answers as the SDK does for a
    session it does not know (404 "Session not found") within seconds, rather than hang; the
    official client hears it too."""
    answers: list[httpx2.Response] = []

    async def keep(response: httpx2.Response) -> None:
        answers.append(response)

    async with httpx2.AsyncClient(timeout=30, event_hooks={"response": [keep]}) as http:
        transport = streamable_http_client(f"{site.url}/mcp", http_client=http)
        async with Client(transport, mode="legacy") as client:
            for _ in range(4):  # round robin: some reach the holder through the other worker
                assert (await client.list_tools()).tools
            assert relayed("".join(site.logs().values()))
            session = next(r.headers["mcp-session-id"] for r in answers if r.status_code == 200)
            [holder] = [p for p in site.procs if session.endswith(f"-{p.pid}")]
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=10)
            asked = time.monotonic()
            with pytest.raises(MCPError, match="Session not found"):
                await client.list_tools()
            assert time.monotonic() - asked < ACCEPT_TIMEOUT + 5
        [left] = [w for w, p in zip(site.workers, site.procs, strict=True) if p is not holder]
        asked = time.monotonic()
        reply = await http.post(
            f"{left}/mcp",
            json={"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}},
            headers={
                "Accept": "application/json, text/event-stream",
                "Mcp-Session-Id": session,
                "MCP-Protocol-Version": "2025-11-25",
            },
        )
        assert time.monotonic() - asked < ACCEPT_TIMEOUT + 5
    assert reply.status_code == 404
    assert reply.json()["error"]["message"] == "Session not found"


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["mcp-push", "mcp-respond"])
async def test_a_legacy_call_whose_worker_is_killed_ends_on_record_and_its_client_is_told(
    site: Site,
    cluster: dict[str, str],  # noqa: F811
    transport: str,
) -> None:
    """The worker holding a legacy MCP session dies (SIGKILL) while its call waits for the
    person's answer (a pushed question, or a ``_respond`` request): the call ends on record
    (never live for ever, listed to operators), and the official client, which reconnects to
    the worker left, is told it ended within seconds, instead of waiting until its own
    timeout."""
    thinking = asyncio.Event()  # the person never answers: the worker dies first

    async def person(context: Any, params: Any) -> types.ElicitResult:
        await thinking.wait()
        return types.ElicitResult(action="cancel")

    async def notes(params: Any) -> None:  # a _respond request arrives as a notification
        return None

    options: dict[str, Any] = (
        {"elicitation_callback": person} if transport == "mcp-push" else {"logging_callback": notes}
    )
    async with Client(f"{site.url}/mcp", mode="legacy", **options) as client:
        call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
        call_id, holder = await asyncio.to_thread(asking, cluster, transport)
        [victim] = [p for p in site.procs if holder.endswith(f":{p.pid}")]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        killed = time.monotonic()
        try:
            done = await asyncio.wait_for(call, HOLDER_GONE_BOUND)
        except MCPError as error:  # told as an error of the request: also the truth
            told: str = error.error.message
        else:
            assert done.is_error, done
            told = " ".join(c.text for c in done.content if isinstance(c, types.TextContent))
        took = time.monotonic() - killed
        thinking.set()
    assert "stopped" in told and "call the tool again" in told, told
    assert took < HOLDER_GONE_BOUND
    row_now = cluster_rows(cluster, call_id)
    assert row_now["status"] == "aborted", row_now


def asking(cluster: dict[str, str], transport: str) -> tuple[str, str]:  # noqa: F811
    """(call id, holder) of the call of ``transport`` once it waits for an answer on record."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [
            (c, w)
            for c, t, w, s in active_rows(cluster)
            if (t, s) == (transport, "awaiting_elicit")
        ]
        if found:
            return found[0]
        time.sleep(0.1)  # polling the record, not waiting for time to pass
    raise AssertionError(f"no {transport} call came to ask")


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(180)
async def test_a_redis_blip_mid_question_does_not_end_a_live_legacy_call(
    site: Site,
    own_redis: OwnRedis,  # noqa: F811
    cluster: dict[str, str],  # noqa: F811
) -> None:
    """Redis is gone for 5 s while a legacy call waits for its person, through the balancer:
    the workers cannot relay the session's requests meanwhile, which says nothing of the
    client (it is there, and answers once Redis is back): the call goes on and books once."""
    asked, back = asyncio.Event(), asyncio.Event()
    person = Person()

    async def answering(context: Any, params: Any) -> types.ElicitResult:
        if not asked.is_set():
            asked.set()
            await back.wait()  # the person answers after the blip
        return await person(context, params)

    async with Client(f"{site.url}/mcp", mode="legacy", elicitation_callback=answering) as client:
        call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
        await asyncio.wait_for(asked.wait(), 30)
        own_redis.kill()
        await asyncio.sleep(BLIP)  # the outage's length, not a synchronisation
        own_redis.start()
        back.set()
        done = await asyncio.wait_for(call, 90)
    assert not done.is_error, done
    booked = done.structured_content
    assert booked is not None and booked["booked"] is True, booked
    await issued_once(cluster, booked["ticket"])


BLIP = 5.0  # seconds Redis is away


HOLDER_GONE_BOUND = 20.0  # seconds from the kill to the client being told


def active_rows(cluster: dict[str, str]) -> list[tuple[str, str, str, str]]:  # noqa: F811
    """(call id, transport, holder, status) of every live call on record."""
    import psycopg

    with psycopg.connect(cluster["DATABASE_URL"].replace("postgres://", "postgresql://")) as db:
        return db.execute(
            "SELECT id, transport, worker, status FROM chatbridge_chat_toolsession "
            "WHERE status IN ('running', 'awaiting_elicit', 'awaiting_sample')"
        ).fetchall()


def relayed(logs: str) -> list[str]:
    """The legacy MCP requests the workers logged (``logs``) as relayed to them from another
    worker."""
    return [line for line in logs.splitlines() if "relayed from" in line]


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(180)
async def test_a_2026_07_28_booking_through_the_balancer_is_booked_once(
    shared: Site, logged: Callable[[], str]
) -> None:
    """The official Python client, protocol 2026-07-28: each retry goes to whichever worker
    the balancer picks, and one that is not the call's holder has the holder serve it."""
    flight = search_flights(ROUTE["origin"], ROUTE["destination"])[0].id
    async with Client(f"{shared.url}/mcp", mode=MODERN, elicitation_callback=Person()) as client:
        key, state = await at_seat_question(client)
        review = await retry(client, state, seat_answer(key, free_seat(flight)))
        pay_key, pay_state = await paid_after_review(client, review)
        done = await retry(client, pay_state, {pay_key: types.ElicitResult(action="accept")})
    assert isinstance(done, types.CallToolResult) and not done.is_error, done
    booked = done.structured_content
    assert booked is not None and booked["booked"] is True
    rows = await issued_once(shared.env, booked["ticket"])
    assert rows["resumes"] == 0  # never taken over
    assert "retry served by its holder" in logged()  # round robin sent one to the other worker


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(180)
async def test_the_final_retry_sent_to_both_workers_at_once_issues_one_ticket(
    shared: Site,
) -> None:
    """A client (or a balancer's retry) sends the same 2026-07-28 retry to both workers at
    once: the one not holding the call has the holder serve it, under the call's lock: one
    ticket, the same result twice."""
    first, second = shared.workers
    async with (
        Client(f"{first}/mcp", mode=MODERN, elicitation_callback=Person()) as one,
        Client(f"{second}/mcp", mode=MODERN, elicitation_callback=Person()) as other,
    ):
        _, state, answer = await at_final_retry(one)
        results = await asyncio.gather(retry(one, state, answer), retry(other, state, answer))
    assert all(isinstance(r, types.CallToolResult) and not r.is_error for r in results), results
    assert results[0].structured_content == results[1].structured_content
    await issued_once(shared.env, results[0].structured_content["ticket"])


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(240)
async def test_typescript_clients_book_through_the_balancer(
    shared: Site, logged: Callable[[], str], tmp_path: Path
) -> None:
    """The official TypeScript SDK 1.x (legacy sessions, served by their holder whichever
    worker a request reaches; forms and the payment page, and ``_respond`` for a client that
    cannot elicit) and the official Tasks client (each tasks/get and tasks/update to either
    worker)."""
    balanced = shared.url
    sdk = run_script("sdk-v1.mjs", "@modelcontextprotocol/sdk", f"{balanced}/mcp", home=tmp_path)
    assert_booked(sdk["formAndUrl"])
    assert sdk["formAndUrl"]["result"]["paid"] == {"last4": "4242"}
    assert_respond_path(sdk["respond"])
    assert relayed(logged())  # its session's requests reached the holder through the other
    tasks = run_script("tasks.mjs", f"{balanced}/mcp", home=tmp_path)
    book = tasks["book"]
    assert (book["kind"], book["status"], book["errors"]) == ("task", "completed", [])
    assert book["result"]["booked"] is True and book["result"]["paid"] == {"last4": "4242"}


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(180)
async def test_a_chat_booking_in_chromium_through_the_balancer(
    browser: Browser, shared: Site
) -> None:
    """A new user in chromium: every page, static file and the payment page through the
    balancer, the socket on one worker; no request fails, the booking is confirmed once."""
    before = booked_calls(shared.env)
    chat, failed = await open_watched_chat(browser, shared.url)
    await ask_for_flights(chat)
    flight_id = await pick_first_flight(chat)
    seat = first_free(flight_id)
    await chat.get_by_role("button", name=seat, exact=True).click()
    await review_and_pay(chat)
    await expect_confirmation(chat, seat)
    assert failed == []
    [call_id] = booked_calls(shared.env) - before
    rows = await recorded(shared.env, call_id)
    assert rows["status"] == "completed" and len(rows["steps"]) == 1


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(180)
async def test_kill_9_of_the_worker_holding_a_booking_another_finishes_it_once(
    site: Site,
    cluster: dict[str, str],  # noqa: F811
) -> None:
    """The worker holding a chat booking dies (SIGKILL) with the seat question open: the
    browser comes back through the balancer, which sends it to the worker left; that one
    resumes the call from its journal and finishes it: one ticket."""
    async with aiohttp.ClientSession() as http:
        chat = await RemoteChat.open(http, site.url)
        await chat.connect(site.url)
        flight_id, seats = await chat.book_to_seat()
        holder = cluster_rows(cluster, seats["call_id"])["worker"]
        [victim] = [proc for proc in site.procs if holder.endswith(f":{proc.pid}")]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        await chat.close()
        await wait_connect(chat, site.url)  # refused by the dead one until HAProxy knows
        label = seat_map_for(flight_id).first_free()
        await chat.answer(seats, seat_label=label)
        await chat.review_and_pay(timeout=40, base=site.url)
        done = await chat.next("tool_call", status="completed", timeout=40)
        assert (done["result"]["booked"], done["result"]["seat"]) == (True, label)
        await chat.close()
    rows = await issued_once(cluster, done["result"]["ticket"], seats["call_id"])
    assert rows["resumes"] == 1


async def readiness() -> tuple[int, bytes]:
    """``GET /readyz`` of this process's application: its status and body."""
    scope = {"type": "http", "method": "GET", "path": "/readyz", "headers": [], "query_string": b""}
    app = ApplicationCommunicator(application, {**scope, "http_version": "1.1", "scheme": "http"})
    await app.send_input({"type": "http.request", "body": b""})
    start = await app.receive_output(5)
    body = await app.receive_output(5)
    return start["status"], body["body"]


@pytest.mark.django_db(transaction=True)
async def test_readiness_says_whether_the_runtime_runs() -> None:
    assert await readiness() == (503, b"not ready\n")  # no runtime yet: a balancer waits
    from chatbridge.runtime import ChatBridgeRuntime

    runtime = ChatBridgeRuntime.from_settings()
    await runtime.start()
    try:
        assert await readiness() == (200, b"ready\n")
    finally:
        await runtime.aclose()
    assert await readiness() == (503, b"not ready\n")
