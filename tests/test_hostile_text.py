"""Text no database stores alike, and numbers JSON cannot hold, on a real server over SQLite and
over PostgreSQL: refused where they enter, in words, the same on both; refused answers stay on
record as they came.

PostgreSQL refuses a NUL character (U+0000) in text and ``\\u0000`` in jsonb, where SQLite
stores both; NaN, Infinity and ``1e999`` are not JSON (SQLite's JSON check and jsonb refuse
them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from chatbridge.chat.chat_errors import nul_refusal
from plugins.book_flight.data import search_flights, seat_map_for
from tests.chat_http import RemoteChat
from tests.servers import free_port, migrated_postgres, migrated_template, start_uvicorn, stop
from tests.test_services import PG_HOST, PG_PORT, require

pytestmark = pytest.mark.slow

ROUTE = {"origin": "JFK", "destination": "LAX"}
FLIGHT = search_flights("JFK", "LAX")[0]
FREE_SEAT = seat_map_for(FLIGHT.id).first_free()
NUL_FIELD = "Enter plain text: this has a NUL character (U+0000), which cannot be saved"
FEEDBACK = {
    "name": "Ada",
    "email": "ada@example.org",
    "visit_date": "2026-11-20",
    "rating": 4,
    "topic": "praise",
}


@dataclass
class Site:
    url: str
    database: str  # a SQLite path or a PostgreSQL URL

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` (JSON columns decoded) from the server's database."""
        if self.database.startswith("postgres"):
            import psycopg

            with psycopg.connect(self.database.replace("postgres://", "postgresql://")) as db:
                return [tuple(r) for r in db.execute(sql).fetchall()]
        with contextlib.closing(sqlite3.connect(self.database)) as db:
            return [
                tuple(json.loads(v) if isinstance(v, str) and v[:1] in "[{" else v for v in r)
                for r in db.execute(sql).fetchall()
            ]

    async def rejected(self, key: str, count: int) -> list[dict[str, Any]]:
        """The refused answers on record for questions ``key``, once there are ``count``
        (they are written in the background)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while True:
            found = [
                entry
                for (rejected,) in self.rows(
                    f"SELECT rejected FROM chatbridge_chat_journalrecord WHERE key = '{key}'"
                )
                for entry in rejected or ()
            ]
            if len(found) >= count or loop.time() > deadline:
                return found
            await asyncio.sleep(0.1)


def _serve(database: str, tmp: Path) -> Iterator[Site]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DATABASE_")},
        "DATABASE_URL": database if database.startswith("postgres") else f"sqlite:///{database}",
        "DJANGO_SETTINGS_MODULE": "chatbridge.settings",
        "CHATBRIDGE_MCP_REQUEST_TIMEOUT": "10",
    }
    if not database.startswith("postgres"):  # a copy of the run's migrated database
        shutil.copyfile(migrated_template(), database)
    port = free_port()
    proc = start_uvicorn(port, env, log=tmp / "server.log")
    try:
        yield Site(f"http://127.0.0.1:{port}", database)
    finally:
        stop(proc)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp(request.param)
    if request.param == "sqlite":
        yield from _serve(str(tmp / "db.sqlite3"), tmp)
        return
    require("PostgreSQL", PG_HOST, PG_PORT)
    with migrated_postgres(PG_HOST, PG_PORT, "chatbridge_text") as url:
        yield from _serve(url, tmp)


@contextlib.asynccontextmanager
async def chat_on(site: Site) -> AsyncIterator[RemoteChat]:
    async with aiohttp.ClientSession() as http:
        chat = await RemoteChat.open(http, site.url)
        await chat.connect(site.url)
        try:
            yield chat
        finally:
            await chat.close()


# -- the chat ------------------------------------------------------------------------------


async def test_chat_commands_with_nul_are_refused_in_words_and_the_chat_goes_on(
    site: Site,
) -> None:
    async with chat_on(site) as chat:
        await chat.send({"type": "user_message", "text": "Send\x00 feedback"})
        refused = await chat.next("error")
        assert refused == {
            "type": "error",
            "code": "BAD_TEXT",
            "message": "Your message has a NUL character (U+0000), which cannot be saved. "
            "Remove it and send it again.",
        }
        await chat.send({"type": "user_message", "text": "Send feedback"})
        asked = await chat.next("approval_request")
        await chat.send({"type": "deny", "call_id": asked["call_id"], "reason": "no\x00"})
        assert (await chat.next("error"))["message"] == nul_refusal("The reason")
        await chat.send({"type": "approve", "call_id": asked["call_id"]})
        form = await chat.next("elicit", key="feedback")
        await chat.send(
            {"type": "abort", "session_id": form["session_id"], "reason": "stop\x00 it"}
        )
        assert (await chat.next("error"))["message"] == nul_refusal("The reason")

        await chat.answer(form, **FEEDBACK, comment="Great\x00 tool")
        again = await chat.next("elicit", key="feedback")
        assert again["errors"] == {"comment": [NUL_FIELD]}
        await chat.answer(again, **FEEDBACK, comment="Great tool")
        done = await chat.next("tool_call", status="completed")
        assert done["result"]["comment"] == "Great tool"
        await chat.next("assistant_message")
    [refusal] = await site.rejected("feedback", 1)
    assert refusal["data"]["comment"] == "Great\ufffd tool"  # on record, as far as it can be
    assert refusal["errors"] == {"comment": ["String should not contain a NUL character (U+0000)"]}
    titles = site.rows(
        "SELECT title FROM chatbridge_chat_conversation WHERE title LIKE 'Send%feedback'"
    )
    assert titles == [("Send feedback",)]


async def test_a_name_with_nul_is_refused_in_words(site: Site) -> None:
    async with aiohttp.ClientSession() as http:
        chat = await RemoteChat.open(http, site.url)
        cookies = {"Cookie": f"sessionid={chat.cookie}"}
        rename = f"{site.url}/c/{chat.conversation_id}/rename/"
        async with http.get(rename, headers=cookies) as form:
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', await form.text())
            csrf = form.cookies["csrftoken"].value
        assert token is not None
        async with http.post(
            rename,
            data={"title": "Trip\x00 to LA", "csrfmiddlewaretoken": token[1]},
            headers={**cookies, "Cookie": f"sessionid={chat.cookie}; csrftoken={csrf}"},
            allow_redirects=False,
        ) as refused:
            assert refused.status == 400
            page = await refused.text()
    assert "The name has a NUL character (U+0000), which cannot be saved." in page
    assert site.rows(
        f"SELECT title FROM chatbridge_chat_conversation WHERE id = '{chat.conversation_id}'"
        if site.database.startswith("postgres")
        else "SELECT title FROM chatbridge_chat_conversation WHERE id = "
        f"'{chat.conversation_id.replace('-', '')}'"
    ) == [("New chat",)]


# -- MCP -----------------------------------------------------------------------------------


class Answers:
    """An elicitation callback: the flight's id with a NUL first, then the real one; then a
    free seat, the review, and a decline of the payment."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.messages.append(params.message)
        if params.mode == "url":
            return types.ElicitResult(action="decline")
        if len(self.messages) == 1:
            return types.ElicitResult(action="accept", content={"flight_id": f"{FLIGHT.id}\x00"})
        if len(self.messages) == 2:
            return types.ElicitResult(action="accept", content={"flight_id": FLIGHT.id})
        if "seat" in params.message:
            return types.ElicitResult(action="accept", content={"seat_label": FREE_SEAT})
        return types.ElicitResult(action="accept", content={"confirm": True})


REFUSED_FLIGHT = (
    "Your previous answer was not accepted. Flight id: Enter plain text: this has a NUL "
    "character (U+0000), which cannot be saved. Please try again."
)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_an_mcp_answer_with_nul_is_asked_again(site: Site, mode: str) -> None:
    answers = Answers()
    async with Client(f"{site.url}/mcp", mode=mode, elicitation_callback=answers) as client:
        result = await client.call_tool("book_flight", ROUTE)
    assert result.structured_content == {"booked": False, "reason": "payment declined"}
    assert REFUSED_FLIGHT in answers.messages[1]


async def test_a_respond_payload_with_nul_is_asked_again(site: Site) -> None:
    requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            requests.put_nowait(params.data)

    async with Client(f"{site.url}/mcp", mode="legacy", logging_callback=on_log) as client:
        call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
        first = await asyncio.wait_for(requests.get(), 10)
        refused = await client.call_tool(
            "_respond",
            {"request_id": first["request_id"], "payload": {"flight_id": f"{FLIGHT.id}\x00"}},
        )
        assert refused.is_error
        assert refused.content[0].text == REFUSED_FLIGHT  # type: ignore[union-attr]
        await client.call_tool(  # the request stays open: answered again
            "_respond", {"request_id": first["request_id"], "payload": {"action": "cancel"}}
        )
        result = await call
    assert result.structured_content == {"booked": False, "reason": "flight selection cancelled"}


async def test_tool_arguments_with_nul_are_refused_in_words(site: Site) -> None:
    async with Client(f"{site.url}/mcp", mode="legacy") as client:
        result = await client.call_tool("book_flight", {"origin": "JF\x00K", "destination": "LAX"})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "origin: String should not contain a NUL character (U+0000)" in text


# -- numbers JSON cannot hold ----------------------------------------------------------------


class Literals(httpx2.AsyncHTTPTransport):
    """Real HTTP, but ``"__NaN__"``-style placeholders in a request body go out as the bare
    literal (``NaN``, ``Infinity``, ``1e999``): careless clients send them, the SDK cannot."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        changed = re.sub(rb'"__([-\w.+]+)__"', rb"\1", body)
        if changed != body:
            headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
            request = httpx2.Request(
                request.method,
                request.url,
                headers=headers,
                content=changed,
                extensions=request.extensions,
            )
        return await super().handle_async_request(request)


async def test_refused_nan_and_infinite_answers_are_on_record(site: Site) -> None:
    """Seats answered with NaN, Infinity and 1e999 are refused, and the record keeps each one
    (as its name: JSON has no such number)."""
    sent = iter(["__NaN__", "__Infinity__", "__1e999__"])
    messages: list[str] = []

    async def answer(context: Any, params: Any) -> types.ElicitResult:
        messages.append(params.message)
        if "Select your flight" in params.message:
            return types.ElicitResult(action="accept", content={"flight_id": FLIGHT.id})
        row = next(sent, None)
        if row is not None:
            return types.ElicitResult(action="accept", content={"row": row, "seat": "A"})
        return types.ElicitResult(action="cancel")

    before = len(await site.rejected("pick_seat", 0))
    async with httpx2.AsyncClient(transport=Literals(), timeout=30) as http:
        transport = streamable_http_client(f"{site.url}/mcp", http_client=http)
        async with Client(transport, mode="legacy", elicitation_callback=answer) as client:
            result = await client.call_tool("book_flight", ROUTE)
    assert result.structured_content == {"booked": False, "reason": "seat selection cancelled"}
    assert sum("Your previous answer was not accepted" in m for m in messages) >= 2
    recorded = (await site.rejected("pick_seat", before + 3))[before:]
    assert [r["data"] for r in recorded] == [
        {"row": "NaN", "seat": "A"},
        {"row": "Infinity", "seat": "A"},
        {"row": "Infinity", "seat": "A"},  # 1e999 is read as Infinity
    ]
    assert all(r["errors"].get("row") for r in recorded)
