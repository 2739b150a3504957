"""Revoking a user's MCP token (``chatbridge/records/mcp_tokens.py``) as an operator does it, in
the admin of a real server: the token's live calls end on record, aborted with the reason,
within seconds, whatever path they take (legacy push, 2026-07-28 rounds, Tasks) and whichever
worker runs them (a killed one's calls too); its open SSE streams close on every worker; its
next request is refused (401). Another user's calls go on."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import re
import signal
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
import httpx2
import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from chatbridge.author.model_context import extract_context
from chatbridge.records.lease import WORKER_ID
from chatbridge.records.mcp_tokens import issue_token, revoke_tokens
from chatbridge.records.models import McpToken, ToolSession, WorkerHeartbeat
from tests.raw_mcp import RawSession, SseEvent, sse_events
from tests.servers import free_port, migrated_env, start_daphne, start_each, stop, superuser
from tests.test_mcp_tasks import McpClient, question
from tests.test_worker_faults import cluster, own_redis  # noqa: F401 (fixtures)

REVOKED = "its MCP token was revoked"
# Seconds within which everything a revoked token had open has ended: each worker checks the
# tokens of what it holds every second (docs/mcp-server.md), with room for a loaded machine.
BOUND = 6.0
LEGACY = "2025-11-25"
CARDS = {"count": 3}
TOKENS = "/admin/chatbridge_chat/mcptoken/"


# -- the operator, in the admin -----------------------------------------------------------------


class Staff:
    """A staff member signed in to the admin of ``base``."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http, self.base = http, base

    async def _form(self, path: str) -> str:
        async with self.http.get(f"{self.base}{path}") as page:
            assert page.status == 200, await page.text()
            found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', await page.text())
        assert found is not None
        return found.group(1)

    async def post(self, path: str, form: dict[str, str]) -> aiohttp.ClientResponse:
        form = {**form, "csrfmiddlewaretoken": await self._form(path)}
        headers = {"Referer": f"{self.base}{path}"}
        return await self.http.post(f"{self.base}{path}", data=form, headers=headers)

    async def sign_in(self, username: str, password: str) -> None:
        form = {"username": username, "password": password, "next": "/admin/"}
        async with await self.post("/admin/login/", form) as reply:
            assert reply.status == 200 and "Log out" in await reply.text()

    async def token_for(self, username: str) -> tuple[str, str]:
        """A new user and a token created for them: (the token's id, the token)."""
        user = {
            "username": username,
            "usable_password": "true",
            "password1": "pw-9d7c2b1e",
            "password2": "pw-9d7c2b1e",
        }
        async with await self.post("/admin/auth/user/add/", user) as reply:
            found = re.search(r"/admin/auth/user/(\d+)/change/", str(reply.url))
        assert found is not None, reply.url
        async with await self.post(
            f"{TOKENS}add/", {"user": found.group(1), "name": f"{username}'s agent"}
        ) as page:
            shown = await page.text()
        token = re.search(r'id="cb-new-token"[^>]*value="([^"]+)"', shown)
        async with self.http.get(f"{self.base}{TOKENS}?q={username}") as listing:
            pk = re.search(r'name="_selected_action" value="(\d+)"', await listing.text())
        assert token is not None and pk is not None
        return pk.group(1), token.group(1)

    async def revoke(self, token_pk: str) -> str:
        """Revoke the token with "Revoke the selected tokens": what the admin then says."""
        form = {"action": "revoke", "_selected_action": token_pk}
        async with await self.post(TOKENS, form) as reply:
            text = await reply.text()
        said = re.search(r'<li class="success">([^<]*)</li>', text)
        assert said is not None, text
        return said.group(1)


@asynccontextmanager
async def staff(base: str, username: str, password: str) -> AsyncIterator[Staff]:
    jar = aiohttp.CookieJar(unsafe=True)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(cookie_jar=jar, timeout=timeout) as http:
        member = Staff(http, base)
        await member.sign_in(username, password)
        yield member


# -- the user's agent, raw JSON-RPC -------------------------------------------------------------


@dataclass
class Legacy:
    """A legacy MCP session (2025-11-25, form and URL elicitation) opened with a token; its
    requests can be sent to any worker (``url``), the session staying where it was opened."""

    raw: RawSession
    url: str
    asked: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1000))

    def headers(self, **extra: str) -> dict[str, str]:
        return {**self.raw._headers(), **extra}

    async def waiting_call(self, url: str | None = None) -> dict[str, Any]:
        """A pick_card call whose question is never answered: its JSON-RPC response, once the
        server ends it. Each question it is asked goes to ``asked``."""
        request_id = next(self._ids)
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call"}
        body["params"] = {"name": "pick_card", "arguments": CARDS}
        async with self.raw.http.stream(
            "POST", url or self.url, json=body, headers=self.headers()
        ) as reply:
            assert reply.status_code == 200, await reply.aread()
            async for event in sse_events(reply):
                message = event.message or {}
                if message.get("method") == "elicitation/create":
                    self.asked.put_nowait(message)
                elif message.get("id") == request_id and "method" not in message:
                    return message
        raise AssertionError("the call's stream ended without its response")

    async def stream(self, opened: asyncio.Event, url: str | None = None) -> list[SseEvent]:
        """The session's GET event stream, until the server ends it: what it sent."""
        headers = self.headers(Accept="text/event-stream")
        headers.pop("Content-Type")
        received: list[SseEvent] = []
        async with self.raw.http.stream("GET", url or self.url, headers=headers) as reply:
            assert reply.status_code == 200, await reply.aread()
            opened.set()
            async for event in sse_events(reply):
                received.append(event)
        return received


@asynccontextmanager
async def legacy_session(url: str, token: str) -> AsyncIterator[Legacy]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        raw = RawSession(http, url, LEGACY)
        capabilities: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}
        info = {"name": "revocation-test", "version": "0"}
        params: dict[str, Any] = {
            "protocolVersion": LEGACY,
            "capabilities": capabilities,
            "clientInfo": info,
        }
        assert "result" in await raw.request("initialize", params)
        await raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield Legacy(raw, url)


async def waiting_calls(
    legacy: Legacy, count: int, url: str | None = None
) -> list[asyncio.Task[Any]]:
    """``count`` waiting calls of ``legacy`` (through ``url``), each asked its question."""
    calls = [asyncio.create_task(legacy.waiting_call(url)) for _ in range(count)]
    for _ in range(count):
        await asyncio.wait_for(legacy.asked.get(), 60)
    return calls


async def open_stream(legacy: Legacy, url: str | None = None) -> asyncio.Task[list[SseEvent]]:
    opened = asyncio.Event()
    stream = asyncio.create_task(legacy.stream(opened, url))
    await asyncio.wait_for(opened.wait(), 30)
    return stream


async def rounds(url: str, token: str, http: httpx.AsyncClient, count: int) -> list[str]:
    """``count`` 2026-07-28 calls, each suspended at its question: their requestStates."""
    modern = McpClient(http, url, token=token, tasks=False)
    made = await asyncio.gather(*[modern.call("pick_card", CARDS) for _ in range(count)])
    assert all(m["resultType"] == "input_required" for m in made), made[0]
    return [str(m["requestState"]) for m in made]


async def tasks(url: str, token: str, http: httpx.AsyncClient, count: int) -> list[str]:
    """``count`` tasks, each waiting for its question's answer: their ids."""
    client = McpClient(http, url, token=token)
    made = await asyncio.gather(*[client.call("pick_card", CARDS) for _ in range(count)])
    assert all(m["status"] == "input_required" for m in made), made[0]
    return [str(m["taskId"]) for m in made]


def first_card(task: dict[str, Any]) -> dict[str, Any]:
    key, _, params = question(task)
    cards = extract_context(params["requestedSchema"], params["message"])["cards"]
    return {key: {"action": "accept", "content": {"card": cards[0]["code"]}}}


# -- what is on record --------------------------------------------------------------------------


def calls_of(database_url: str, username: str) -> list[dict[str, Any]]:
    """The tool-session rows of ``username``'s calls."""
    columns = "id, transport, status, abort_reason, aborted_by, outcome, worker, meta"
    query = f"SELECT {columns} FROM chatbridge_chat_toolsession"
    if database_url.startswith("sqlite:///"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as db:
            found = db.execute(query).fetchall()
    else:
        import psycopg

        with psycopg.connect(database_url.replace("postgres://", "postgresql://")) as db:
            found = db.execute(query).fetchall()
    names = columns.split(", ")
    rows = [dict(zip(names, row, strict=True)) for row in found]
    for row in rows:
        for name in ("outcome", "meta"):
            if isinstance(row[name], str):
                row[name] = json.loads(row[name])
    return [r for r in rows if (r["meta"] or {}).get("user") == username]


def live(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["status"] in ("running", "awaiting_elicit", "awaiting_sample")]


async def all_ended(database_url: str, username: str, by: float) -> list[dict[str, Any]]:
    """``username``'s calls once none is live, or as they are at ``by`` (monotonic)."""
    while True:
        rows = await asyncio.to_thread(calls_of, database_url, username)
        if not live(rows) or time.monotonic() > by:
            return rows
        await asyncio.sleep(0.1)  # polling the record, up to the bound


def assert_revoked(rows: list[dict[str, Any]], operator: str) -> None:
    for row in rows:
        assert row["status"] == "aborted", row
        assert row["aborted_by"] == f"operator {operator}", row
        assert row["abort_reason"] == REVOKED, row
        assert row["outcome"]["reason"] == REVOKED, row


def stopped_text(operator: str) -> str:
    return f"An operator stopped this tool call: Aborted by operator {operator}: {REVOKED}"


async def refused(http: httpx.AsyncClient, url: str, token: str, body: dict[str, Any]) -> int:
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Mcp-Method": str(body["method"]),
    }
    return (await http.post(url, json=body, headers=headers)).status_code


# -- on record ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_revoking_ends_the_calls_of_gone_workers_on_record_and_leaves_live_ones_theirs() -> None:
    token = McpToken(user=User.objects.create(username="dan"), name="agent")
    issue_token(token)
    meta = {"user": "dan", "token_id": str(token.pk), "transport": "mcp-mrtr"}
    WorkerHeartbeat.objects.create(worker="elsewhere:1", beat_at=timezone.now())
    call = {"tool_name": "pick_card", "arguments": CARDS, "status": "awaiting_elicit", "meta": meta}
    ToolSession.objects.create(id="mcp_gone", worker="gone:1", **call)
    paid = {"committed": "payment", "commitment": {"key": "payment", "what": "the payment"}}
    ToolSession.objects.create(id="mcp_paid", worker="gone:1", **call, **paid)
    ToolSession.objects.create(id="mcp_held", worker="elsewhere:1", **call)

    assert revoke_tokens(McpToken.objects.filter(pk=token.pk), "ops") == (1, 3)
    assert revoke_tokens(McpToken.objects.filter(pk=token.pk), "ops") == (0, 0)  # once

    gone = ToolSession.objects.get(pk="mcp_gone")  # ended here, through its lease
    assert (gone.status, gone.aborted_by, gone.abort_reason) == ("aborted", "operator ops", REVOKED)
    assert gone.worker == WORKER_ID and gone.outcome["reason"] == REVOKED
    assert gone.error == f"Aborted by operator ops: {REVOKED} (no running worker held it)"
    # Committed: not ended; whoever resumes it finishes it or compensates, told to stop.
    kept = ToolSession.objects.get(pk="mcp_paid")
    assert (kept.status, kept.worker) == ("awaiting_elicit", "gone:1")
    assert kept.commitment["abort_reason"] == REVOKED
    assert kept.commitment["abort_by"] == "operator ops"
    held = ToolSession.objects.get(pk="mcp_held")  # its worker, alive, ends it
    assert (held.status, held.worker, held.abort_reason) == (
        "awaiting_elicit",
        "elsewhere:1",
        REVOKED,
    )


# -- one worker, on SQLite ----------------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    base: str
    database_url: str
    operator: str
    password: str

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """daphne on SQLite, /mcp open to users' tokens only, and a superuser."""
    database = tmp_path_factory.mktemp("mcp-tokens") / "db.sqlite3"
    env = migrated_env(database)
    env.pop("REDIS_URL", None)
    env.update(CHATBRIDGE_MCP_PUBLIC="0", CHATBRIDGE_MCP_TOKEN="")
    operator, password = superuser(database)
    port = free_port()
    daphne = start_daphne(port, env)
    try:
        yield Site(f"http://127.0.0.1:{port}", env["DATABASE_URL"], operator, password)
    finally:
        stop(daphne)


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_revoking_a_token_ends_its_50_live_calls_and_closes_its_stream_in_seconds(
    site: Site,
) -> None:
    async with staff(site.base, site.operator, site.password) as admin:
        bob_pk, bob = await admin.token_for("bob")
        _, carol = await admin.token_for("carol")
        async with (
            legacy_session(site.url, bob) as legacy,
            httpx.AsyncClient(timeout=60) as http,
        ):
            stream = await open_stream(legacy)
            pushed = await waiting_calls(legacy, 17)
            states = await rounds(site.url, bob, http, 17)
            bobs = await tasks(site.url, bob, http, 16)
            [carols] = await tasks(site.url, carol, http, 1)
            assert len(live(calls_of(site.database_url, "bob"))) == 50

            started = time.monotonic()
            said = await asyncio.wait_for(admin.revoke(bob_pk), BOUND)
            assert said == "Revoked 1 token; aborted 50 live calls made with them."
            answers = await asyncio.wait_for(asyncio.gather(*pushed), BOUND)
            sent = await asyncio.wait_for(stream, BOUND)  # the server ended it
            rows = await all_ended(site.database_url, "bob", started + BOUND)
            took = time.monotonic() - started

            assert not live(rows) and len(rows) == 50, live(rows)
            assert took < BOUND
            assert_revoked(rows, site.operator)
            assert sorted({r["transport"] for r in rows}) == ["mcp-mrtr", "mcp-push", "mcp-task"]
            for answer in answers:  # each legacy client was told why its call stopped
                assert answer["result"]["isError"] is True
                assert answer["result"]["content"][0]["text"] == stopped_text(site.operator)
            assert all(event.data == "" for event in sent)  # nothing but its priming event

            # Everything the token asks next is refused.
            ping = {"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {}}
            again = await legacy.raw.http.post(site.url, json=ping, headers=legacy.headers())
            assert again.status_code == 401
            get = {"jsonrpc": "2.0", "id": 9, "method": "tasks/get"}
            get["params"] = {"taskId": bobs[0]}
            assert await refused(http, site.url, bob, get) == 401
            retry = {"jsonrpc": "2.0", "id": 9, "method": "tools/call"}
            retry["params"] = {"name": "pick_card", "arguments": CARDS, "requestState": states[0]}
            assert await refused(http, site.url, bob, retry) == 401

            # Carol's task was not touched: she answers it and it completes.
            theirs = McpClient(http, site.url, token=carol)
            await theirs.update(carols, first_card(await theirs.get(carols)))
            assert (await theirs.settled(carols))["status"] == "completed"


# -- a cluster: PostgreSQL, Redis, workers A, B and C (killed) ---------------------------------


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(300)
async def test_a_revoked_tokens_calls_and_streams_end_on_every_worker_and_a_dead_ones_on_record(
    cluster: dict[str, str],  # noqa: F811 (the fixture)
) -> None:
    env = {
        **cluster,
        "CHATBRIDGE_MCP_PUBLIC": "0",
        "CHATBRIDGE_MCP_TOKEN": "",
        "CHATBRIDGE_MCP_MAX_SESSIONS_PER_CALLER": "1000",
        "CHATBRIDGE_MCP_MAX_CALLS_PER_CALLER": "1000",
    }
    ports = free_port(), free_port(), free_port()
    workers = start_each(*(functools.partial(start_daphne, port, env) for port in ports))
    a, b, c = (f"http://127.0.0.1:{port}/mcp" for port in ports)
    try:
        async with staff(a.removesuffix("/mcp"), "ops", "pw-123456") as admin:
            bob_pk, bob = await admin.token_for("bob")
            async with (
                legacy_session(a, bob) as on_a,
                legacy_session(b, bob) as on_b,
                httpx.AsyncClient(timeout=60) as http,
            ):
                # Each session's event stream held open through the other worker (relayed).
                streams = [await open_stream(on_a, b), await open_stream(on_b, a)]
                pushed = [
                    *await waiting_calls(on_a, 7),
                    *await waiting_calls(on_a, 7, b),  # relayed to A, which holds the session
                    *await waiting_calls(on_b, 6),
                ]
                await rounds(a, bob, http, 7)
                await rounds(b, bob, http, 7)
                await tasks(a, bob, http, 7)
                await tasks(b, bob, http, 7)
                on_c = await tasks(c, bob, http, 2)
                workers[2].send_signal(signal.SIGKILL)  # C dies holding two of them
                workers[2].wait(timeout=10)
                database = env["DATABASE_URL"]
                dead = {r["worker"] for r in calls_of(database, "bob") if r["id"] in on_c}
                assert len(live(calls_of(database, "bob"))) == 50

                started = time.monotonic()
                said = await asyncio.wait_for(admin.revoke(bob_pk), BOUND)
                assert said == "Revoked 1 token; aborted 50 live calls made with them."
                answers = await asyncio.wait_for(asyncio.gather(*pushed), BOUND)
                await asyncio.wait_for(asyncio.gather(*streams), BOUND)  # both ended
                rows = await all_ended(database, "bob", started + BOUND)
                took = time.monotonic() - started

                assert not live(rows) and len(rows) == 50, live(rows)
                assert took < BOUND
                assert_revoked(rows, "ops")
                for answer in answers:
                    assert answer["result"]["content"][0]["text"] == stopped_text("ops")
                # The dead worker's calls were ended on record, through their lease.
                ended = [r for r in rows if r["id"] in on_c]
                assert len(ended) == 2 and not {r["worker"] for r in ended} & dead
                for url in (a, b):
                    get = {"jsonrpc": "2.0", "id": 9, "method": "tasks/get"}
                    get["params"] = {"taskId": on_c[0]}
                    assert await refused(http, url, bob, get) == 401
    finally:
        for worker in workers:
            if worker.poll() is None:
                stop(worker)
