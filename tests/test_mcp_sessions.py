"""Every MCP call is a durable PluginSession, exactly once over 2026-07-28 round trips."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from django.contrib.admin.utils import quote
from mcp import Client
from mcp.shared.exceptions import MCPError

from chatbridge import PluginRegistry, SessionManager
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.mcp.server import McpBridge, McpSettings
from plugins.book_flight import tool as book_flight_tool
from plugins.book_flight.plugin import book_flight_plugin
from tests.mcp_results import InputResponses, elicitation, text_of
from tests.pages import pay, with_pages
from tests.raw_mcp import raw_session, sse_events
from tests.servers import ROOT, free_port, migrated_env, start_daphne, stop, wait_for_port
from tests.test_mcp import FLIGHTS, ROUTE, Person, answer_requests, free_seat

CARDS = {"name": "pick_card", "arguments": {"count": 3}}

MODERN = "2026-07-28"


@pytest.fixture
def tickets(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ticket the book_flight tool issues in this process."""
    issued: list[str] = []
    real = book_flight_tool.issue_ticket  # type: ignore[attr-defined]  # patched where looked up

    def counting(flight_id: str, seat: str, *, idempotency_key: str) -> str:
        issued.append(real(flight_id, seat, idempotency_key=idempotency_key))
        return issued[-1]

    monkeypatch.setattr(book_flight_tool, "issue_ticket", counting)
    return issued


@pytest.fixture
async def bridge() -> Any:
    manager = with_pages(SessionManager(sampler=LiteLLMSampler("offline/mcp")))
    yield McpBridge(
        PluginRegistry([book_flight_plugin]), manager, McpSettings(state_keys=[b"k" * 32])
    )
    await manager.shutdown("test finished")


def flight_answer(key: str) -> InputResponses:
    return {key: types.ElicitResult(action="accept", content={"flight_id": FLIGHTS[0].id})}


def seat_answer(key: str, seat: dict[str, Any]) -> dict[str, types.ElicitResult]:
    return {key: types.ElicitResult(action="accept", content=seat)}


async def at_seat_question(client: Client) -> tuple[str, str]:
    """Drive a 2026-07-28 booking to the seat question: (its key, its requestState)."""
    first = await client.session.call_tool("book_flight", ROUTE, allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult)
    [key] = first.input_requests
    second = await client.session.call_tool(
        "book_flight",
        ROUTE,
        allow_input_required=True,
        input_responses=flight_answer(key),
        request_state=first.request_state,
    )
    assert isinstance(second, types.InputRequiredResult)
    [seat_key] = second.input_requests
    assert second.request_state is not None
    return seat_key, second.request_state


async def retry(client: Client, state: str, responses: dict[str, Any]) -> Any:
    return await client.session.call_tool(
        "book_flight",
        ROUTE,
        allow_input_required=True,
        input_responses=responses,
        request_state=state,
    )


async def paid_after_review(client: Client, review: Any) -> tuple[str, str]:
    """Confirm the review, pay on the payment question's page: (its key, its requestState)."""
    assert isinstance(review, types.InputRequiredResult), review
    [key] = review.input_requests
    confirm = {key: types.ElicitResult(action="accept", content={"confirm": True})}
    payment = await retry(client, review.request_state, confirm)
    assert isinstance(payment, types.InputRequiredResult), payment
    [(pay_key, request)] = payment.input_requests.items()
    params = elicitation(request)
    assert isinstance(params, types.ElicitRequestURLParams)
    await pay(params.url)
    return pay_key, payment.request_state


async def at_final_retry(client: Client) -> tuple[str, str, dict[str, Any]]:
    """A booking paid on its page: (the payment's key, its requestState, the consent)."""
    key, state = await at_seat_question(client)
    review = await retry(client, state, seat_answer(key, free_seat(FLIGHTS[0].id)))
    pay_key, pay_state = await paid_after_review(client, review)
    return pay_key, pay_state, {pay_key: types.ElicitResult(action="accept")}


async def test_the_final_retry_sent_twice_issues_one_ticket_and_the_same_result(
    bridge: McpBridge, tickets: list[str]
) -> None:
    async with Client(bridge.server, mode=MODERN, elicitation_callback=Person()) as client:
        _, state, answer = await at_final_retry(client)
        first = await retry(client, state, answer)
        again = await retry(client, state, answer)
    assert isinstance(first, types.CallToolResult) and not first.is_error
    assert again.structured_content == first.structured_content
    assert first.structured_content["ticket"] == tickets[0]
    assert len(tickets) == 1


async def test_the_final_retry_sent_twice_at_once_issues_one_ticket(
    bridge: McpBridge, tickets: list[str]
) -> None:
    async with Client(bridge.server, mode=MODERN, elicitation_callback=Person()) as client:
        _, state, answer = await at_final_retry(client)
        first, second = await asyncio.gather(
            retry(client, state, answer), retry(client, state, answer)
        )
    assert first.structured_content == second.structured_content
    assert first.structured_content["booked"] is True
    assert len(tickets) == 1


async def test_a_different_seat_for_a_consumed_state_is_a_clear_error(
    bridge: McpBridge, tickets: list[str]
) -> None:
    async with Client(bridge.server, mode=MODERN, elicitation_callback=Person()) as client:
        key, state = await at_seat_question(client)
        review = await retry(client, state, seat_answer(key, free_seat(FLIGHTS[0].id)))
        other = await retry(client, state, seat_answer(key, {"row": 30, "seat": "F"}))
        pay_key, pay_state = await paid_after_review(client, review)
        booked = await retry(client, pay_state, {pay_key: types.ElicitResult(action="accept")})
    assert booked.structured_content["booked"] is True
    assert other.is_error
    assert other.content[0].text == (
        "The question 'pick_seat' of this call was already answered and its answer acted on; "
        "a different answer cannot be accepted. Send the same answer again to get the same "
        "outcome, or call the tool again without requestState."
    )
    assert len(tickets) == 1


async def test_replaying_an_older_state_does_not_reset_the_refused_answer_count(
    bridge: McpBridge, tickets: list[str]
) -> None:
    async with Client(bridge.server, mode=MODERN, elicitation_callback=Person()) as client:
        key, state = await at_seat_question(client)
        bad = seat_answer(key, {"row": "front", "seat": "A"})
        # The first state each time, never the one the previous retry handed out.
        *asked_again, ended = [await retry(client, state, bad) for _ in range(5)]
        again = await retry(client, state, bad)  # after its end: the same end again
    assert all(isinstance(again, types.InputRequiredResult) for again in asked_again)
    message = elicitation(asked_again[1].input_requests[key]).message
    assert "Your previous answer was not accepted. Row: Enter a number from 1 to 99" in message
    assert isinstance(ended, types.CallToolResult) and ended.is_error
    assert [text_of(c) for c in ended.content] == [
        "The answer to 'pick_seat' was refused 5 times, as often as a question allows, so the "
        "question was closed and the call failed. Last refusal: Row: Enter a number from 1 to "
        "99. Call the tool again to start over."
    ]
    assert again.model_dump() == ended.model_dump()
    assert tickets == []


async def test_a_retry_after_a_restart_resumes_the_call_from_its_journal(
    tickets: list[str],
) -> None:
    from chatbridge.mcp.results import StoredCall

    rows: dict[str, StoredCall] = {}

    class Store:  # the restarted server is the only one: its predecessor is gone
        worker = "after"

        async def load(self, call_id: str) -> StoredCall | None:
            return rows.get(call_id)

        async def holder_elsewhere(self, call_id: str) -> str | None:
            return None  # its predecessor is gone

        async def alive(self, worker: str) -> bool:
            return False

        async def claim(self, call_id: str, holder: str) -> bool:
            return True

        async def route(self, holder: str, message: dict[str, Any]) -> dict[str, Any] | None:
            raise AssertionError("nothing is alive to route to")

    def bridge_on(manager: SessionManager) -> McpBridge:
        return McpBridge(
            PluginRegistry([book_flight_plugin]),
            manager,
            McpSettings(state_keys=[b"k" * 32]),
            store=Store(),
        )

    before = with_pages(SessionManager(sampler=LiteLLMSampler("offline/mcp")))
    async with Client(bridge_on(before).server, mode=MODERN, elicitation_callback=Person()) as c:
        key, state = await at_seat_question(c)
    [live] = [before.get(i.id) for i in before.list_active()]
    assert live is not None
    rows[live.id] = StoredCall("book_flight", ROUTE, live.journal, "awaiting_elicit", None, "")
    await before.shutdown("server restarting")
    after = with_pages(SessionManager(sampler=LiteLLMSampler("offline/mcp")))
    try:
        async with Client(bridge_on(after).server, mode=MODERN, elicitation_callback=Person()) as c:
            review = await retry(c, state, seat_answer(key, free_seat(FLIGHTS[0].id)))
            pay_key, pay_state = await paid_after_review(c, review)
            booked = await retry(c, pay_state, {pay_key: types.ElicitResult(action="accept")})
    finally:
        await after.shutdown("test finished")
    assert booked.structured_content["booked"] is True
    assert booked.structured_content["flight"] == FLIGHTS[0].number
    assert len(tickets) == 1


async def test_a_modern_client_that_cannot_be_asked_gets_an_explanation_at_once(
    server: str,
) -> None:
    started = time.monotonic()
    async with Client(f"{server}/mcp", mode=MODERN) as client:
        result = await client.call_tool("book_flight", ROUTE)
    assert time.monotonic() - started < 10
    assert result.is_error
    text = text_of(result.content[0])
    assert text.startswith("Tool 'book_flight' asks the user questions, and this client can ")
    assert '"io.modelcontextprotocol/logLevel": "notice"' in text and "'_respond'" in text


async def test_a_respond_from_another_mcp_session_is_refused(server: str) -> None:
    requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            requests.put_nowait(params.data)

    async with Client(f"{server}/mcp", mode="legacy", logging_callback=on_log) as owner:
        call = asyncio.create_task(owner.call_tool("book_flight", ROUTE))
        request = await asyncio.wait_for(requests.get(), 10)
        payload = {"flight_id": FLIGHTS[0].id}
        async with Client(f"{server}/mcp", mode="legacy") as stranger:
            with pytest.raises(MCPError) as info:
                await stranger.call_tool(
                    "_respond", {"request_id": request["request_id"], "payload": payload}
                )
        assert f"No open request {request['request_id']!r}" in info.value.error.message
        answered = await owner.call_tool(
            "_respond", {"request_id": request["request_id"], "payload": payload}
        )
        assert answered.structured_content["ok"] is True
        call.cancel()


def short_bridge(manager: SessionManager, request_timeout: float) -> McpBridge:
    return McpBridge(
        PluginRegistry([book_flight_plugin]),
        manager,
        McpSettings(state_keys=[b"k" * 32], request_timeout=request_timeout),
    )


async def test_a_pushed_question_nobody_answers_expires_as_cancel() -> None:
    manager = with_pages(SessionManager(sampler=LiteLLMSampler("offline/mcp")))

    async def silent(context: Any, params: Any) -> types.ElicitResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    try:
        bridge = short_bridge(manager, request_timeout=0.5)
        async with Client(bridge.server, mode="legacy", elicitation_callback=silent) as client:
            result = await asyncio.wait_for(client.call_tool("book_flight", ROUTE), 10)
    finally:
        await manager.shutdown("test finished")
    assert result.structured_content == {"booked": False, "reason": "flight selection cancelled"}


async def test_a_cancelled_call_aborts_its_session() -> None:
    manager = with_pages(SessionManager(sampler=LiteLLMSampler("offline/mcp")))
    asked = asyncio.Event()
    ended: list[str] = []

    async def waiting(context: Any, params: Any) -> types.ElicitResult:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    try:
        bridge = short_bridge(manager, request_timeout=60)
        async with Client(bridge.server, mode="legacy", elicitation_callback=waiting) as client:
            call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
            await asyncio.wait_for(asked.wait(), 10)
            [info] = manager.list_active()
            session = manager.get(info.id)
            assert session is not None and session.meta["transport"] == "mcp-push"
            call.cancel()  # the client sends notifications/cancelled
            event = await asyncio.wait_for(session.wait_finished(), 10)
            ended.append(event.type)
            assert event.type == "aborted" and event.reason == "the MCP client cancelled the call"
    finally:
        await manager.shutdown("test finished")
    assert ended == ["aborted"] and manager.list_active() == []


async def test_a_modern_client_that_opted_in_to_logs_answers_through_respond(
    server: str,
) -> None:
    requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            requests.put_nowait(params.data)

    async with Client(
        f"{server}/mcp", mode=MODERN, logging_callback=on_log, log_level="notice"
    ) as client:
        call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
        await answer_requests(client, requests, flight=2)
        result = await asyncio.wait_for(call, 20)
    assert result.structured_content["flight"] == FLIGHTS[2].number


# -- operators and vanishing clients: daphne on Redis, a database the test can read ----------


class Site:
    def __init__(self, url: str, env: dict[str, str], database: Path) -> None:
        self.url, self.env, self.database = url, env, database

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        with sqlite3.connect(self.database) as db:
            return list(
                db.execute(
                    "SELECT id, status, transport, error, aborted_by "
                    "FROM chatbridge_chat_toolsession ORDER BY created_at"
                )
            )

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", "chatbridge_sessions", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("mcp-sessions")
    redis_port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(redis_port, redis)
        env = migrated_env(tmp / "db.sqlite3")
        env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        env["CHATBRIDGE_MCP_REQUEST_TIMEOUT"] = "60"
        port = free_port()
        daphne = start_daphne(port, env, log=tmp / "daphne.log")
        try:
            yield Site(f"http://127.0.0.1:{port}", env, tmp / "db.sqlite3")
        finally:
            stop(daphne)
    finally:
        stop(redis)


def wait_until(check: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


async def test_an_mcp_call_is_listed_and_an_operator_abort_reaches_the_client(site: Site) -> None:
    asked = asyncio.Event()

    async def person(context: Any, params: Any) -> types.ElicitResult:
        asked.set()
        await asyncio.Event().wait()  # a person who never answers
        raise AssertionError("unreachable")

    async with Client(f"{site.url}/mcp", mode="legacy", elicitation_callback=person) as client:
        call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
        await asyncio.wait_for(asked.wait(), 15)
        listing = await asyncio.to_thread(site.manage, "list")
        [line] = [x for x in listing.splitlines() if "book_flight" in x]
        session_id = line.split()[0]
        assert line.split()[1:4] == ["book_flight", "awaiting_elicit", "pick_flight"]
        assert "mcp-push" in line
        aborted = await asyncio.to_thread(
            site.manage, "abort", session_id, "--reason", "maintenance", "--operator", "ops"
        )
        assert aborted.startswith(f"Session {session_id} aborted on worker ")
        result = await asyncio.wait_for(call, 15)
    assert result.is_error
    assert text_of(result.content[0]) == (
        "An operator stopped this tool call: Aborted by operator ops: maintenance"
    )
    row = wait_until(lambda: [r for r in site.rows() if r[0] == session_id and r[1] == "aborted"])
    assert row == [
        (session_id, "aborted", "mcp-push", "Aborted by operator ops: maintenance", "operator ops")
    ]


CRASHING_CLIENT = textwrap.dedent(
    """
    import asyncio, sys
    from mcp import Client

    async def person(context, params):
        print("asked", flush=True)
        await asyncio.Event().wait()

    async def main():
        async with Client(sys.argv[1] + "/mcp", mode="legacy", elicitation_callback=person) as c:
            await c.call_tool("book_flight", {"origin": "JFK", "destination": "LAX"})

    asyncio.run(main())
    """
)


CRASHING_RESPOND_CLIENT = textwrap.dedent(
    """
    import asyncio, sys
    from mcp import Client

    async def on_log(params):
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            print("asked", flush=True)

    async def main():
        async with Client(sys.argv[1] + "/mcp", mode="legacy", logging_callback=on_log) as c:
            await c.call_tool("book_flight", {"origin": "JFK", "destination": "LAX"})

    asyncio.run(main())
    """
)


@pytest.mark.parametrize(
    ("script", "transport"),
    [(CRASHING_CLIENT, "mcp-push"), (CRASHING_RESPOND_CLIENT, "mcp-respond")],
    ids=["pushed question", "_respond request"],
)
def test_a_legacy_client_killed_mid_question_ends_its_call_as_gone(
    site: Site, script: str, transport: str
) -> None:
    """Killed while its question waits (pushed to it, or sent as a request notification for a
    client that cannot elicit and answers with ``_respond``), the client sends no close: its
    call ends as its client going away, found by the pings on the call's stream, not after the
    request's timeout (and, for ``_respond``, not as the user's cancel)."""
    before = {r[0] for r in site.rows()}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, site.url],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "asked"
        [new] = [r for r in site.rows() if r[0] not in before]
        assert new[1:3] == ("awaiting_elicit", transport)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        killed_at = time.monotonic()
        ended = wait_until(
            lambda: [r for r in site.rows() if r[0] == new[0] and r[1] != "awaiting_elicit"], 20
        )
        assert time.monotonic() - killed_at < 15  # a ping every 5 s, 5 s to answer
        assert ended[0][1:4] == ("aborted", transport, "the MCP client went away")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.slow
async def test_a_round_trip_survives_a_server_killed_between_questions(site: Site) -> None:
    port = free_port()
    first = start_daphne(port, site.env)
    try:
        async with Client(
            f"http://127.0.0.1:{port}/mcp", mode=MODERN, elicitation_callback=Person()
        ) as c:
            key, state = await at_seat_question(c)
    finally:
        first.kill()
        first.wait()
    [row] = [r for r in site.rows() if r[1] == "awaiting_elicit" and r[2] == "mcp-mrtr"]
    port = free_port()
    second = start_daphne(port, site.env)
    try:
        async with Client(
            f"http://127.0.0.1:{port}/mcp", mode=MODERN, elicitation_callback=Person()
        ) as c:
            review = await retry(c, state, seat_answer(key, free_seat(FLIGHTS[0].id)))
            pay_key, pay_state = await paid_after_review(c, review)
            consent = {pay_key: types.ElicitResult(action="accept")}
            booked = await retry(c, pay_state, consent)
            again = await retry(c, pay_state, consent)
    finally:
        stop(second)
    assert booked.structured_content["booked"] is True
    assert again.structured_content == booked.structured_content
    [(status,)] = [r[1:2] for r in site.rows() if r[0] == row[0]]
    assert status == "completed"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_runtime")
async def test_staff_see_an_mcp_call_in_the_admin_and_abort_it() -> None:
    from chatbridge.runtime import current_runtime
    from tests.test_admin import CHANGELIST, login, row

    manager = current_runtime().manager
    bridge = McpBridge(
        PluginRegistry([book_flight_plugin]),
        manager,
        McpSettings(state_keys=[b"k" * 32]),
    )  # the running runtime's worker listener carries the operator's abort
    asked = asyncio.Event()

    async def waiting(context: Any, params: Any) -> types.ElicitResult:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with Client(bridge.server, mode="legacy", elicitation_callback=waiting) as client:
        call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
        await asyncio.wait_for(asked.wait(), 10)
        [info] = manager.list_active()
        staff = await login(staff=True)
        listing = (await staff.get(CHANGELIST + "?transport=mcp-push")).content.decode()
        assert info.id in listing and "pick_flight: Select your flight" in listing
        active = (await staff.get(CHANGELIST + "active/")).content.decode()
        assert info.id in active
        url = f"{CHANGELIST}{quote(info.id)}/abort/"
        response = await staff.post(url, {"reason": "maintenance"})
        assert response.status_code == 302
        result = await asyncio.wait_for(call, 10)
    assert result.is_error
    assert text_of(result.content[0]) == (
        "An operator stopped this tool call: Aborted by operator ops: maintenance"
    )
    record = await row(info.id)
    for _ in range(100):  # the recorder writes the end just after the tool stops
        if record.status == "aborted":
            break
        await asyncio.sleep(0.05)
        record = await row(info.id)
    assert (record.status, record.transport, record.conversation_id) == (
        "aborted",
        "mcp-push",
        None,
    )
    assert record.aborted_by == "operator ops"


async def cancel_then_delete(url: str) -> None:
    """A client that cancels its call while asked, then ends its session at once."""
    async with raw_session(url, "2025-11-25", {"elicitation": {}}) as session:
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": CARDS}
        cancel = {"method": "notifications/cancelled", "params": {"requestId": 7}}
        headers = session._headers()
        async with session.http.stream("POST", url, json=body, headers=headers) as reply:
            async for event in sse_events(reply):
                if event.message and event.message.get("method") == "elicitation/create":
                    break
            await asyncio.gather(  # the cancellation may arrive after the session ended
                session.http.post(url, json={"jsonrpc": "2.0", **cancel}, headers=headers),
                session.http.delete(url, headers=headers),
            )


async def test_a_client_cancelling_and_ending_its_session_logs_no_error(site: Site) -> None:
    before = {r[0] for r in site.rows()}
    for _ in range(5):  # the cancellation and the DELETE race: several rounds
        await cancel_then_delete(f"{site.url}/mcp")

    def all_ended() -> list[Any]:  # the five ends are written as each call stops: wait for all
        ended = [r for r in site.rows() if r[0] not in before and r[1] != "awaiting_elicit"]
        return ended if len(ended) >= 5 else []

    ended = wait_until(all_ended) or [
        r for r in site.rows() if r[0] not in before and r[1] != "awaiting_elicit"
    ]
    # Each ends aborted, as cancelled when the cancellation arrived first, or as its client
    # gone when the DELETE ended the session first: both true, neither an error.
    outcomes = {
        ("aborted", "mcp-push", "the MCP client cancelled the call", "mcp-client"),
        ("aborted", "mcp-push", "the MCP client went away", ""),
    }
    assert len(ended) == 5 and {r[1:] for r in ended} <= outcomes, ended
    log = (site.database.parent / "daphne.log").read_text()
    assert "ERROR" not in log and "Traceback" not in log, log


# sse-starlette's keep-alive: a stream with nothing to say sends its first bytes after this.
SSE_PING_SECONDS = 15


async def test_an_event_stream_is_open_at_once_on_daphne_not_at_its_first_ping(site: Site) -> None:
    """Daphne (Twisted) writes a response's headers with its first body bytes, and an idle
    event stream has none until sse-starlette's first ping, 15 s later: a client opening the
    session's GET stream, or a call's stream before its first event, waited that long to
    know it was open. ChatBridge sends the headers as the stream starts."""
    async with raw_session(f"{site.url}/mcp") as session:
        headers = {**session._headers(), "Accept": "text/event-stream"}
        headers.pop("Content-Type")

        async def opened() -> tuple[int, str]:
            async with session.http.stream("GET", session.url, headers=headers) as reply:
                return reply.status_code, reply.headers["content-type"]

        status, kind = await asyncio.wait_for(opened(), SSE_PING_SECONDS - 5)
        assert status == 200 and kind.startswith("text/event-stream")
