"""A URL question's link that expired while its question is open, over MCP: a visit is
refused (the link may have leaked) and the question stays open until its own timeout (the
owner of a chat gets a fresh link instead: tests/test_url_chat.py)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client

from tests.test_mcp import ROUTE, Person


class WaitsAtThePayment(Person):
    """Answers like a person, then consents to the payment link and hands it to the test."""

    def __init__(self) -> None:
        super().__init__()
        self.links: asyncio.Queue[str] = asyncio.Queue()

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        if params.mode == "url":
            self.links.put_nowait(params.url)
            return types.ElicitResult(action="accept")
        return await super().__call__(context, params)


def link_row(database: Path, path: str) -> tuple[Any, ...]:
    with contextlib.closing(sqlite3.connect(database)) as db:
        row = db.execute(
            "SELECT closed_at, result FROM chatbridge_chat_elicitlink ORDER BY id DESC LIMIT 1"
        ).fetchone()
    assert row is not None, path
    return tuple(row)


async def test_a_visit_to_an_expired_link_leaves_its_mcp_question_open(
    server: str, server_database: Path
) -> None:
    person = WaitsAtThePayment()
    async with Client(f"{server}/mcp", mode="legacy", elicitation_callback=person) as client:
        call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
        url = await asyncio.wait_for(person.links.get(), 20)
        with contextlib.closing(sqlite3.connect(server_database)) as db, db:
            db.execute("UPDATE chatbridge_chat_elicitlink SET expires_at = '2000-01-01 00:00:00'")
        async with httpx2.AsyncClient() as http:
            visit = await http.get(url)
        assert visit.status_code == 410 and "This link has expired" in visit.text
        # Not closed, nothing answered: the call still waits (till its own timeout).
        assert link_row(server_database, url) == (None, None)
        call.cancel()  # the client leaves; its call is aborted
        with contextlib.suppress(asyncio.CancelledError):
            await call
