"""Paid means booked, on real servers: tasks/cancel races the payment page, and a server is
stopped (SIGTERM) or killed (kill -9) as the payment lands; the server that takes over finishes
every paid booking without anyone visiting it (tests/races.py says what is checked)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from tests.chat_http import TEST_CARD, RemoteChat
from tests.races import TRIALS, Record, Tally, Told, offsets
from tests.servers import fixed_port, migrated_env, start_uvicorn, stop
from tests.test_mcp import free_seat
from tests.test_mcp_tasks import ROUTE, McpClient, booking_answer, question

pytestmark = pytest.mark.slow

_CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def recorded(database: Path, call_id: str) -> Record:
    with sqlite3.connect(database) as db:
        status, commitment, result = db.execute(
            "SELECT status, commitment, result FROM chatbridge_chat_toolsession WHERE id = ?",
            (call_id,),
        ).fetchone()
        steps = [
            key
            for (key,) in db.execute(
                "SELECT key FROM chatbridge_chat_journalrecord WHERE session_id = ? "
                "AND kind = 'step'",
                (call_id,),
            )
        ]
        [(paid,)] = db.execute(
            "SELECT count(*) FROM chatbridge_chat_elicitlink WHERE call_id = ? "
            "AND key = 'payment' AND completed_at IS NOT NULL",
            (call_id,),
        )
    outcome = json.loads(result) if result else None
    booked = outcome.get("booked") if isinstance(outcome, dict) else None
    return Record(
        call_id,
        bool(paid),
        steps.count("issue_ticket"),
        steps.count("compensate_payment"),
        status,
        json.loads(commitment) if commitment else None,
        booked,
    )


def ended(database: Path, call_id: str, timeout: float = 30.0) -> Record:
    """The call's record once it has ended (a server taking it over finishes it)."""
    deadline = time.monotonic() + timeout
    while True:
        record = recorded(database, call_id)
        if record.status in ("completed", "failed", "aborted") or time.monotonic() > deadline:
            return record
        time.sleep(0.1)


class Page:
    """The payment page open in a browser tab: loaded first, paid when the test says."""

    def __init__(self, url: str) -> None:
        self.url, self.token = url, ""
        self.http = httpx.AsyncClient(timeout=20)

    async def open(self) -> bool:
        page = await self.http.get(self.url)
        token = _CSRF.search(page.text)
        self.token = token[1] if token is not None else ""
        return page.status_code == 200 and bool(self.token)

    async def pay(self) -> bool | None:
        """True if it said "Payment received", False if it refused, None if no answer came
        (its server went away meanwhile)."""
        try:
            done = await self.http.post(
                self.url, data={**TEST_CARD, "csrfmiddlewaretoken": self.token}
            )
        except httpx.TransportError:
            return None
        finally:
            await self.http.aclose()
        return done.status_code == 200 and "Payment received" in done.text


async def pay_page(url: str) -> bool | None:
    page = Page(url)
    if not await page.open():
        await page.http.aclose()
        return False
    return await page.pay()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    database = tmp_path / "db.sqlite3"
    env = migrated_env(database, "tests.tasks_settings")
    env.pop("REDIS_URL", None)
    env.update(CHATBRIDGE_MCP_PUBLIC="1", CHATBRIDGE_COMMITMENT_SWEEP="0.3")
    env["RACE_DATABASE"] = str(database)
    yield env


async def task_to_payment(client: McpClient) -> tuple[str, str]:
    """A book_flight task answered up to its payment: its id and the payment page's link."""
    task = await client.call("book_flight", ROUTE)
    task_id = str(task["task"]["taskId"] if "task" in task else task["taskId"])
    while True:
        state = await client.settled(task_id)
        key, name, params = question(state)
        if params.get("mode") == "url":
            await client.update(task_id, {key: {"action": "accept"}})  # consent to the page
            return task_id, str(params["url"])
        await client.update(task_id, {key: booking_answer(name, params)})


async def task_to_payment_at(base: str) -> tuple[str, str]:
    async with httpx.AsyncClient() as raw:
        return await task_to_payment(McpClient(raw, f"{base}/mcp"))


async def chat_to_payment_at(base: str) -> tuple[str, str]:
    """A chat booking answered up to its payment: its call id and the payment page's link."""
    async with aiohttp.ClientSession() as http:
        chat = await RemoteChat.open(http, base)
        await chat.connect(base)
        flight_id, seats = await chat.book_to_seat()
        await chat.answer(seats, **free_seat(flight_id))
        review = await chat.next("elicit", key="review")
        await chat.answer(review, confirm=True)
        payment = await chat.next("elicit", key="payment")
        await chat.close()
    return str(payment["call_id"]), str(payment["url"])


async def test_tasks_cancel_never_leaves_a_payment_without_a_ticket(
    env: dict[str, str],
) -> None:
    database, port = Path(env["RACE_DATABASE"]), fixed_port()
    server = start_uvicorn(port, env)
    tally = Tally()
    try:
        async with httpx.AsyncClient() as http:
            client = McpClient(http, f"http://127.0.0.1:{port}/mcp")
            for offset in offsets(max(TRIALS // 2, 10)):
                task_id, url = await task_to_payment(client)
                cancelled: dict[str, Any] = {}

                async def cancel(
                    delay: float, task_id: str = task_id, cancelled: dict[str, Any] = cancelled
                ) -> None:
                    await asyncio.sleep(delay)
                    cancelled.update(await client.cancel(task_id))

                page = Page(url)
                assert await page.open()

                async def pay(delay: float, page: Page = page) -> bool | None:
                    await asyncio.sleep(delay)
                    return await page.pay()

                paid, _ = await asyncio.gather(pay(max(-offset, 0)), cancel(max(offset, 0)))
                told: Told = None
                if "already received" in str(cancelled.get("statusMessage")):
                    told = "committed"
                elif cancelled.get("status") == "cancelled":
                    told = "stopped"
                record = await asyncio.to_thread(ended, database, task_id)
                assert paid is not None
                tally.add(record, paid, told)
    finally:
        stop(server)
    assert tally.inconsistent == []
    assert tally.outcomes["paid and ticketed"] and tally.outcomes["stopped before payment"]
    assert tally.outcomes["paid and ticketed"] and tally.outcomes["stopped before payment"]


@pytest.mark.timeout(60 + 40 * max(TRIALS // 8, 4))  # each trial starts two servers
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_a_server_going_away_as_the_payment_lands_loses_no_ticket(
    env: dict[str, str], how: signal.Signals
) -> None:
    """A chat booking and a task booking at their payment; the server is stopped just before,
    as, or just after the payment; another server on the same database finishes what was
    paid, with nobody visiting the chat or polling the task."""
    database, port = Path(env["RACE_DATABASE"]), fixed_port()
    base = f"http://127.0.0.1:{port}"
    tally = Tally()
    trials = max(TRIALS // 8, 4)
    server = start_uvicorn(port, env)
    try:
        for trial, offset in enumerate(offsets(trials, seed=how.value)):
            call_id, url = await (
                task_to_payment_at(base) if trial % 2 else chat_to_payment_at(base)
            )
            page = Page(url)
            assert await page.open()

            async def go_away(delay: float, server: Any = server) -> None:
                await asyncio.sleep(delay)
                server.send_signal(how)

            async def pay(delay: float, page: Page = page) -> bool | None:
                await asyncio.sleep(delay)
                return await page.pay()

            paid, _ = await asyncio.gather(pay(max(-offset, 0)), go_away(max(offset, 0)))
            # SIGTERM drains and exits on its own (a server that does not is a bug).
            await asyncio.to_thread(server.wait, 15)
            # Another server takes over (the same address: links handed out still work), and
            # serves the next trial. A payment the dying server did not take is made there: a
            # call no worker holds, paid, is finished too.
            server = start_uvicorn(port, env)
            if not recorded(database, call_id).paid:
                assert paid is not True, "the page said paid, but no payment is on record"
                paid = await pay_page(url)
            record = await asyncio.to_thread(ended, database, call_id)
            tally.add(record, bool(paid if paid is not None else record.paid), None)
    finally:
        if server.poll() is None:
            stop(server)
    assert tally.inconsistent == []
    assert tally.outcomes["paid and ticketed"] + tally.outcomes["paid, then refunded"] == trials
