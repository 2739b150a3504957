"""The 2026-07-28 Tasks extension (SEP-2663) on real servers, spoken as raw JSON-RPC: a task is
a durable session, answered through tasks/update, cancelled, resumed after a restart and served
by any worker."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chatbridge.mcp.errors import UNEXPECTED
from chatbridge.mcp.modes import ModeNotDeclared
from plugins.book_flight.data import search_flights, seat_map_for
from tests.pages import pay
from tests.servers import free_port, migrated_env, start_daphne, start_each, stop
from tests.support import BROKEN_CITY
from tests.test_mcp import free_seat
from tests.test_mcp_sessions import wait_until

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
TRIP = {"city": "Lisbon", "nights": 2}
ROUTE = {"origin": "JFK", "destination": "LAX"}


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code, self.message = error.get("code"), str(error.get("message"))


class McpClient:
    """A 2026-07-28 client over plain HTTP: every request carries its own capabilities."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        url: str,
        *,
        token: str = "me",
        tasks: bool = True,
        modes: tuple[str, ...] = ("form", "url"),
    ) -> None:
        self.http, self.url, self.token = http, url, token
        extensions: dict[str, dict[str, Any]] = {TASKS: {}} if tasks else {}
        elicitation: dict[str, dict[str, Any]] = {mode: {} for mode in modes}
        self.capabilities = {"elicitation": elicitation, "extensions": extensions}
        self._ids = 0

    async def rpc(self, method: str, params: dict[str, Any], name: str | None = None) -> Any:
        self._ids += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "raw-tasks-test", "version": "1"},
        }
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MODERN,
            "mcp-method": method,
            "authorization": f"Bearer {self.token}",
        }
        if name is not None:
            headers["mcp-name"] = name
        body = {"jsonrpc": "2.0", "id": self._ids, "method": method}
        body["params"] = {**params, "_meta": meta}
        response = await self.http.post(self.url, json=body, headers=headers, timeout=30)
        message = _message(response)
        if "error" in message:
            raise RpcError(message["error"])
        result = dict(message["result"])
        result.pop("_meta", None)  # the SDK's serverInfo stamp
        return result

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return dict(await self.rpc("tools/call", {"name": tool, "arguments": arguments}, tool))

    async def get(self, task_id: str) -> dict[str, Any]:
        return dict(await self.rpc("tasks/get", {"taskId": task_id}, task_id))

    async def update(self, task_id: str, responses: dict[str, Any]) -> dict[str, Any]:
        params = {"taskId": task_id, "inputResponses": responses}
        return dict(await self.rpc("tasks/update", params, task_id))

    async def cancel(self, task_id: str) -> dict[str, Any]:
        return dict(await self.rpc("tasks/cancel", {"taskId": task_id}, task_id))

    async def settled(self, task_id: str, timeout: float = 20.0) -> dict[str, Any]:
        """Poll tasks/get (as the spec has clients do) until the task is not working."""
        deadline = time.monotonic() + timeout
        while True:
            task = await self.get(task_id)
            if task["status"] != "working" or time.monotonic() > deadline:
                return task


def _message(response: httpx.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:"):
                data = json.loads(line[5:])
                if "id" in data:
                    return dict(data)
        raise AssertionError(f"no response in the stream: {response.text!r}")
    message = dict(response.json())  # errors come with a 4xx status, as JSON-RPC errors
    assert response.status_code == 200 or "error" in message, response.text
    return message


def question(task: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The open question of an input_required task: (its key, the tool's question name, its
    elicitation params)."""
    assert task["status"] == "input_required", task
    [(key, request)] = task["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    return key, key.split(":")[1], request["params"]


def trip_answer(name: str) -> dict[str, Any]:
    content = {"pick_hotel": {"hotel": "Harbour Inn"}, "confirm": {"ok": True}}
    return {"action": "accept", "content": content.get(name, {"stars": 5})}


def booking_answer(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Answer a book_flight question by its name; a question added later (a review) gets its
    required fields from its schema: yes, the first choice, the default."""
    flight = search_flights(ROUTE["origin"], ROUTE["destination"])[0]
    if name == "pick_flight":
        return {"action": "accept", "content": {"flight_id": flight.id}}
    if name == "pick_seat":
        return {"action": "accept", "content": free_seat(flight.id)}
    schema = params.get("requestedSchema") or {}
    content: dict[str, Any] = {}
    for field in schema.get("required", []):
        spec = schema["properties"][field]
        if spec.get("type") == "boolean":
            content[field] = True
        elif "enum" in spec:
            content[field] = spec["enum"][0]
        else:
            content[field] = spec.get("default", "ok")
    return {"action": "accept", "content": content}


async def run_to_end(client: McpClient, task_id: str, answer: Any) -> dict[str, Any]:
    """Answer every question the task asks, by its name, until it ends."""
    while True:
        task = await client.settled(task_id)
        if task["status"] != "input_required":
            return task
        key, name, params = question(task)
        if params.get("mode") == "url":  # the payment: paid on its page; the update consents
            await pay(params["url"])
            assert await client.update(task_id, {key: {"action": "accept"}}) == {
                "resultType": "complete"
            }
            continue
        assert await client.update(task_id, {key: answer(name, params)}) == {
            "resultType": "complete"
        }


def rows(database: Path, call_id: str) -> tuple[str, str, int, int]:
    """(status, transport, resumes, step entries) of a call, as the database has them."""
    with sqlite3.connect(database) as db:
        status, transport, resumes = db.execute(
            "SELECT status, transport, resumes FROM chatbridge_chat_toolsession WHERE id = ?",
            (call_id,),
        ).fetchone()
        [(steps,)] = db.execute(
            "SELECT count(*) FROM chatbridge_chat_journalrecord WHERE session_id = ? "
            "AND kind = 'step'",
            (call_id,),
        )
    return status, transport, resumes, steps


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    database = tmp_path_factory.mktemp("mcp-tasks") / "db.sqlite3"
    env = migrated_env(database, "tests.tasks_settings")
    env.pop("REDIS_URL", None)
    env["CHATBRIDGE_MCP_PUBLIC"] = "1"
    env["TASKS_DATABASE"] = str(database)
    return env


@pytest.fixture(scope="module")
def site(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    daphne = start_daphne(port, env)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(daphne)


@pytest.fixture
async def client(site: str) -> AsyncIterator[McpClient]:
    async with httpx.AsyncClient() as http:
        yield McpClient(http, site)


async def test_a_call_that_asks_becomes_a_task_answered_through_updates(
    client: McpClient, env: dict[str, str]
) -> None:
    discovered = await client.rpc("server/discover", {})
    assert TASKS in discovered["capabilities"]["extensions"]
    created = await client.call("plan_trip", TRIP)
    assert created["resultType"] == "task"
    assert created["status"] == "input_required" and "inputRequests" not in created
    assert created["ttlMs"] > 0 and created["pollIntervalMs"] > 0
    task_id = created["taskId"]
    task = await client.get(task_id)
    assert task["resultType"] == "complete"
    key, name, params = question(task)
    assert name == "pick_hotel" and "Lisbon" in params["message"]
    assert params["requestedSchema"]["properties"]["hotel"]
    assert (await client.get(task_id))["inputRequests"] == task["inputRequests"]  # same key

    done = await run_to_end(client, task_id, lambda name, _: trip_answer(name))
    assert done["status"] == "completed"
    # The CallToolResult as tools/call returns it on 2026-07-28, resultType included (the
    # official ext-tasks client refuses a completed task's result without it).
    assert done["result"]["resultType"] == "complete"
    assert done["result"]["structuredContent"]["booked"] is True
    assert done["result"]["structuredContent"]["stars"] == 5
    assert await client.get(task_id) == done  # the result stays readable
    status, transport, _, steps = rows(Path(env["TASKS_DATABASE"]), task_id)
    assert (status, transport, steps) == ("completed", "mcp-task", 1)


async def test_a_refused_answer_asks_again_under_a_new_key(client: McpClient) -> None:
    task_id = (await client.call("plan_trip", TRIP))["taskId"]
    for name in ("pick_hotel", "confirm"):
        key, asked, _ = question(await client.settled(task_id))
        assert asked == name
        await client.update(task_id, {key: trip_answer(name)})
    key, name, _ = question(await client.settled(task_id))
    assert name == "rate"
    await client.update(task_id, {key: {"action": "accept", "content": {"stars": 9}}})
    again, name, params = question(await client.get(task_id))
    assert name == "rate" and again != key
    assert "not accepted" in params["message"]
    # The refused key is answered: a response under it is ignored, the task keeps waiting.
    await client.update(task_id, {key: {"action": "accept", "content": {"stars": 4}}})
    assert question(await client.get(task_id))[0] == again
    await client.update(task_id, {again: {"action": "accept", "content": {"stars": 4}}})
    done = await client.settled(task_id)
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"]["stars"] == 4


async def test_a_cancelled_task_ends_cancelled(client: McpClient, env: dict[str, str]) -> None:
    task_id = (await client.call("plan_trip", TRIP))["taskId"]
    assert await client.cancel(task_id) == {"resultType": "complete"}
    task = await client.get(task_id)
    assert task["status"] == "cancelled" and "inputRequests" not in task
    assert "cancelled" in task["statusMessage"]
    assert rows(Path(env["TASKS_DATABASE"]), task_id)[0] == "aborted"


async def test_a_task_belongs_to_its_caller_and_to_clients_of_the_extension(
    client: McpClient,
) -> None:
    task_id = (await client.call("plan_trip", TRIP))["taskId"]
    stranger = McpClient(client.http, client.url, token="someone-else")
    with pytest.raises(RpcError) as refused:
        await stranger.get(task_id)
    assert refused.value.code == -32602 and "not found" in refused.value.message
    with pytest.raises(RpcError) as unknown:
        await client.get("mcpt_" + "0" * 56)
    assert unknown.value.code == -32602
    without = McpClient(client.http, client.url, tasks=False)
    with pytest.raises(RpcError) as undeclared:
        await without.get(task_id)
    assert undeclared.value.code == -32021
    # Without the extension, the same call is a 2026-07-28 round trip, as before.
    assert (await without.call("plan_trip", TRIP))["resultType"] == "input_required"
    await client.cancel(task_id)


async def test_book_flight_end_to_end_through_a_task(client: McpClient) -> None:
    created = await client.call("book_flight", ROUTE)
    assert created["resultType"] == "task"
    done = await run_to_end(client, created["taskId"], booking_answer)
    assert done["status"] == "completed", done
    booked = done["result"]["structuredContent"]
    assert booked["booked"] is True and booked["ticket"]


async def test_a_task_changes_the_seat_at_the_review(client: McpClient) -> None:
    """Answered with _meta["io.chatbridge/change"], the review asks the seat again; the task
    books the new seat, once."""
    created = await client.call("book_flight", ROUTE)
    task_id = created["taskId"]
    flight = search_flights(ROUTE["origin"], ROUTE["destination"])[0]
    seats = seat_map_for(flight.id)
    free = [s["label"] for row in seats.grid() for s in row["seats"] if not s["taken"]]
    while True:
        key, name, params = question(await client.settled(task_id))
        if name == "review":
            break
        await client.update(task_id, {key: booking_answer(name, params)})
    exits = params["_meta"]["io.chatbridge/exits"]  # what it offers besides an answer
    assert [(c["key"], c["label"]) for c in exits["change"]] == [
        ("pick_flight", "Change flight"),
        ("pick_seat", "Change seat"),
    ]
    assert exits["decline"]["label"] == "Don't book" and exits["cancel"] is None
    change = {"action": "cancel", "_meta": {"io.chatbridge/change": "pick_seat"}}
    await client.update(task_id, {key: change})
    again, name, _ = question(await client.settled(task_id))
    assert name == "pick_seat" and again != key
    new_seat = {"row": int(free[1][:-1]), "seat": free[1][-1]}
    await client.update(task_id, {again: {"action": "accept", "content": new_seat}})
    done = await run_to_end(client, task_id, booking_answer)
    assert done["status"] == "completed", done
    booked = done["result"]["structuredContent"]
    assert booked["booked"] is True and booked["seat"] == free[1]


async def test_an_update_for_a_question_a_change_abandoned_says_what_the_task_waits_for(
    client: McpClient,
) -> None:
    """The review was left for the seat: an answer to it (a second agent's, or one that crossed
    the change) is refused with an error naming the question now open, not acknowledged."""
    task_id = (await client.call("book_flight", ROUTE))["taskId"]
    while True:
        review, name, params = question(await client.settled(task_id))
        if name == "review":
            break
        await client.update(task_id, {review: booking_answer(name, params)})
    change = {"action": "cancel", "_meta": {"io.chatbridge/change": "pick_seat"}}
    assert await client.update(task_id, {review: change}) == {"resultType": "complete"}
    seat, name, params = question(await client.settled(task_id))
    assert name == "pick_seat"

    with pytest.raises(RpcError) as refused:
        await client.update(task_id, {review: booking_answer("review", {})})
    assert refused.value.code == -32602
    assert refused.value.message == (
        f"The question {review} is no longer open: it was left when an earlier answer was "
        f"changed (Change seat). The task now waits for {seat} "
        f"({params['message'].splitlines()[0]}); tasks/get shows it."
    )
    # The same change sent again (a retry after a lost response) is that change: acknowledged.
    assert await client.update(task_id, {review: change}) == {"resultType": "complete"}
    assert question(await client.get(task_id))[0] == seat  # nothing moved
    done = await run_to_end(client, task_id, booking_answer)
    assert done["status"] == "completed", done


def refusal(tool: str, mode: str, declared: frozenset[str]) -> str:
    """The error text every MCP path gives a client that cannot take a question's mode."""
    return str(ModeNotDeclared(tool, mode, declared))


async def answer_forms_to_end(client: McpClient, task_id: str) -> dict[str, Any]:
    """Answer the form questions of a booking until it ends; no URL question may show."""
    while True:
        task = await client.settled(task_id)
        if task["status"] != "input_required":
            return task
        key, name, params = question(task)
        assert params.get("mode", "form") == "form", params
        await client.update(task_id, {key: booking_answer(name, params)})


async def test_a_form_only_client_is_not_shown_the_payment_page(
    site: str, env: dict[str, str]
) -> None:
    async with httpx.AsyncClient() as http:
        client = McpClient(http, site, modes=("form",))
        task_id = (await client.call("book_flight", ROUTE))["taskId"]
        done = await answer_forms_to_end(client, task_id)
        assert done["status"] == "completed" and done["result"]["isError"] is True
        [content] = done["result"]["content"]
        assert content["text"] == refusal("book_flight", "url", frozenset({"form"}))
        assert await client.get(task_id) == done
    assert rows(Path(env["TASKS_DATABASE"]), task_id)[0] == "aborted"


async def test_a_url_only_client_is_not_shown_a_form(site: str) -> None:
    async with httpx.AsyncClient() as http:
        client = McpClient(http, site, modes=("url",))
        created = await client.call("plan_trip", TRIP)
        assert created["resultType"] == "task"
        done = await client.settled(created["taskId"])
        assert done["status"] == "completed" and done["result"]["isError"] is True
        [content] = done["result"]["content"]
        assert content["text"] == refusal("plan_trip", "form", frozenset({"url"}))


async def test_a_task_that_cannot_start_says_so_without_internals(client: McpClient) -> None:
    """Arguments the tool refuses, or a failure while checking them: the same readable text
    as a plain tools/call gives, as an error result."""
    without = McpClient(client.http, client.url, tasks=False)
    for arguments in ({"city": "Lisbon", "nights": 99}, {"city": BROKEN_CITY, "nights": 2}):
        created = await client.call("plan_trip", arguments)
        plain = await without.call("plan_trip", arguments)
        assert created["isError"] is True and created["content"] == plain["content"]
        [content] = created["content"]
        assert "Error" not in content["text"] and "mcp_" not in content["text"]
    assert "nights" in plain_text(await without.call("plan_trip", {"city": "X", "nights": 99}))
    assert plain_text(created) == UNEXPECTED


def plain_text(result: dict[str, Any]) -> str:
    [content] = result["content"]
    return str(content["text"])


@pytest.fixture
def short_ttl_site(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    daphne = start_daphne(port, {**env, "CHATBRIDGE_MCP_STATE_TTL": "1"})
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(daphne)


async def test_a_task_nobody_continues_expires_on_record(
    short_ttl_site: str, env: dict[str, str]
) -> None:
    """Its live session is aborted when the ttl passes without an update; tasks/get then says
    it expired: as a cancelled task while its end is kept (the ttl again), then as the spec's
    "Task has expired" error (with a 1 s ttl a slow poll may see either). The task may still be
    working when tasks/call answers (under load the tool reaches its question later); once it
    has settled it never works again."""
    database = Path(env["TASKS_DATABASE"])
    async with httpx.AsyncClient() as http:
        client = McpClient(http, short_ttl_site)
        task_id = (await client.call("plan_trip", TRIP))["taskId"]
        try:
            assert (await client.settled(task_id))["status"] in ("input_required", "cancelled")
        except RpcError as exc:
            assert exc.message == "Failed to retrieve task: Task has expired"
        deadline = time.monotonic() + 30
        while row_end(database, task_id)[0] != "aborted" and time.monotonic() < deadline:
            try:
                task = await client.get(task_id)
            except RpcError as exc:
                assert exc.message == "Failed to retrieve task: Task has expired"
            else:
                assert task["status"] in ("input_required", "cancelled"), task
                if task["status"] == "cancelled":
                    assert "the client did not continue" in task["statusMessage"]
    status, error = row_end(database, task_id)
    assert status == "aborted" and "the client did not continue" in error


def refusals(database: Path, call_id: str) -> int:
    """Refused answers on record for the call's open question."""
    with sqlite3.connect(database) as db:
        found = db.execute(
            "SELECT j.rejected FROM chatbridge_chat_journalrecord j "
            "JOIN chatbridge_chat_toolsession t ON t.id = j.session_id "
            "AND t.pending_elicit_id = j.elicit_id WHERE t.id = ?",
            (call_id,),
        ).fetchall()
    return len(json.loads(found[-1][0] or "[]")) if found else 0


def row_end(database: Path, call_id: str) -> tuple[str, str]:
    with sqlite3.connect(database) as db:
        status, error = db.execute(
            "SELECT status, error FROM chatbridge_chat_toolsession WHERE id = ?", (call_id,)
        ).fetchone()
    return str(status), str(error)


@pytest.mark.slow
async def test_after_a_restart_a_task_keeps_its_modes_links_and_expiry(
    env: dict[str, str],
) -> None:
    """A task resumed on another server: its payment link points there; the modes it was
    created with still hold (not those of the request that resumes it); one left suspended past
    its ttl is ended on record when asked for."""
    database = Path(env["TASKS_DATABASE"])
    port = free_port()
    first = start_daphne(port, env)
    try:
        async with httpx.AsyncClient() as http:
            both = McpClient(http, f"http://127.0.0.1:{port}/mcp")
            form_only = McpClient(http, f"http://127.0.0.1:{port}/mcp", modes=("form",))
            paying = (await both.call("book_flight", ROUTE))["taskId"]
            while True:  # up to the payment page
                key, name, params = question(await both.settled(paying))
                if params.get("mode") == "url":
                    assert params["url"].startswith(f"http://127.0.0.1:{port}/")
                    break
                await both.update(paying, {key: booking_answer(name, params)})
            reviewing = (await form_only.call("book_flight", ROUTE))["taskId"]
            for _ in range(2):  # flight and seat; the review stays open
                key, name, params = question(await form_only.settled(reviewing))
                await form_only.update(reviewing, {key: booking_answer(name, params)})
            assert question(await form_only.settled(reviewing))[1] not in (
                "pick_flight",
                "pick_seat",
            )
            forgotten = (await both.call("plan_trip", TRIP))["taskId"]
    finally:
        first.kill()
        first.wait()
    with sqlite3.connect(database) as db:  # left suspended for longer than its ttl
        db.execute(
            "UPDATE chatbridge_chat_toolsession SET updated_at = '2000-01-01 00:00:00' "
            "WHERE id = ?",
            (forgotten,),
        )
    port = free_port()
    second = start_daphne(port, env)
    try:
        async with httpx.AsyncClient() as http:
            both = McpClient(http, f"http://127.0.0.1:{port}/mcp")
            key, _, params = question(await both.get(paying))
            assert params["mode"] == "url"
            assert params["url"].startswith(f"http://127.0.0.1:{port}/")
            await pay(params["url"])
            await both.update(paying, {key: {"action": "accept"}})
            paid = await both.settled(paying)
            # Asked by a client that takes URL mode: the task was created by one that did not.
            reviewed = await answer_forms_to_end(both, reviewing)
            expired = await both.get(forgotten)
            assert await both.get(forgotten) == expired
    finally:
        stop(second)
    assert paid["status"] == "completed", paid
    assert paid["result"]["structuredContent"]["booked"] is True
    assert reviewed["status"] == "completed" and reviewed["result"]["isError"] is True
    [content] = reviewed["result"]["content"]
    assert content["text"] == refusal("book_flight", "url", frozenset({"form"}))
    assert expired["status"] == "cancelled" and "did not continue" in expired["statusMessage"]
    status, error = row_end(database, forgotten)
    assert status == "aborted" and "did not continue" in error


@pytest.mark.slow
async def test_a_task_survives_its_server_being_killed(env: dict[str, str]) -> None:
    database = Path(env["TASKS_DATABASE"])
    port = free_port()
    first = start_daphne(port, env)
    try:
        async with httpx.AsyncClient() as http:
            client = McpClient(http, f"http://127.0.0.1:{port}/mcp")
            task_id = (await client.call("plan_trip", TRIP))["taskId"]
            for name in ("pick_hotel", "confirm"):  # the booking step runs after "confirm"
                key, _, _ = question(await client.settled(task_id))
                await client.update(task_id, {key: trip_answer(name)})
            first_key, name, _ = question(await client.settled(task_id))
            assert name == "rate"
            await client.update(task_id, {first_key: {"action": "accept", "content": {"stars": 9}}})
            key = question(await client.get(task_id))[0]
            assert key != first_key  # refused: asked again under a new key
            deadline = time.monotonic() + 20  # the refusal is on record (written behind)
            while refusals(database, task_id) < 1 and time.monotonic() < deadline:
                await client.get(task_id)
    finally:
        first.kill()
        first.wait()
    assert rows(database, task_id)[0] == "awaiting_elicit"
    port = free_port()
    second = start_daphne(port, env)
    try:
        async with httpx.AsyncClient() as http:
            client = McpClient(http, f"http://127.0.0.1:{port}/mcp")
            resumed = await client.get(task_id)
            assert question(resumed)[:2] == (key, "rate")  # not the refused key again
            await client.update(task_id, {key: trip_answer("rate")})
            done = await client.settled(task_id)
    finally:
        stop(second)
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"]["booked"] is True
    assert rows(database, task_id) == ("completed", "mcp-task", 1, 1)


@pytest.mark.slow
@pytest.mark.services
async def test_two_workers_serve_one_task_and_one_takes_it_over_when_the_other_dies() -> None:
    from tests.test_scale_out import cluster_database
    from tests.test_services import REDIS_HOST, REDIS_PORT, require

    require("Redis", REDIS_HOST, REDIS_PORT)
    with cluster_database(f"redis://{REDIS_HOST}:{REDIS_PORT}/0") as base:
        env = {**base, "DJANGO_SETTINGS_MODULE": "tests.tasks_settings"}
        env["CHATBRIDGE_MCP_PUBLIC"] = "1"
        import psycopg

        def row(call_id: str) -> tuple[str, str, int, int]:
            with psycopg.connect(env["DATABASE_URL"].replace("postgres://", "postgresql://")) as db:
                found = db.execute(
                    "SELECT status, worker, resumes FROM chatbridge_chat_toolsession WHERE id = %s",
                    (call_id,),
                ).fetchone()
                steps = db.execute(
                    "SELECT count(*) FROM chatbridge_chat_journalrecord "
                    "WHERE session_id = %s AND kind = 'step'",
                    (call_id,),
                ).fetchone()
            assert found is not None and steps is not None
            return found[0], found[1], found[2], steps[0]

        port_a, port_b = free_port(), free_port()
        a, b = start_each(lambda: start_daphne(port_a, env), lambda: start_daphne(port_b, env))
        try:
            async with httpx.AsyncClient() as http:
                on_a = McpClient(http, f"http://127.0.0.1:{port_a}/mcp")
                on_b = McpClient(http, f"http://127.0.0.1:{port_b}/mcp")
                task_id = (await on_a.call("plan_trip", TRIP))["taskId"]
                # B shows A's task and answers it: A runs it (the answer is routed there).
                for name in ("pick_hotel", "confirm"):
                    key, asked, _ = question(await on_b.settled(task_id))
                    assert asked == name
                    await on_b.update(task_id, {key: trip_answer(name)})
                key, asked, _ = question(await on_a.settled(task_id))
                assert asked == "rate"
                status, worker, resumes, steps = row(task_id)
                assert (status, worker.endswith(f":{a.pid}"), resumes, steps) == (
                    "awaiting_elicit",
                    True,
                    0,
                    1,
                )
                a.kill()
                a.wait()
                # A is gone: B takes the task over by replay; the booking is not made again.
                assert question(await on_b.get(task_id))[:2] == (key, "rate")
                await on_b.update(task_id, {key: trip_answer("rate")})
                done = await on_b.settled(task_id)
            # The client is told "completed" as the call ends; its row records the end just
            # after (B writing it): read it there, before B is stopped.
            wait_until(lambda: row(task_id)[0] != "running")
        finally:
            stop(a)
            stop(b)
        assert done["status"] == "completed"
        assert done["result"]["structuredContent"]["booked"] is True
        status, worker, resumes, steps = row(task_id)
        assert (status, worker.endswith(f":{b.pid}"), resumes, steps) == ("completed", True, 1, 1)
