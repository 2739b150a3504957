"""Paid means booked: the payment page races every abort path of a running server (chat Abort,
an operator's abort, expiry, MCP cancel and a client going away) and no trial ends paid without
a ticket or a refund, or tells anyone otherwise (tests/races.py says what is checked)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from mcp import Client

from chatbridge.chat.operations import abort_tool_session
from chatbridge.records.models import ElicitLink, JournalRecord, ToolSession
from chatbridge.records.writer import flush
from chatbridge.runtime import ChatBridgeRuntime
from tests.chat_client import ChatClient
from tests.chat_http import TEST_CARD
from tests.races import Record, Tally, Told, offsets
from tests.test_mcp import free_seat

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Stop = Callable[[], Awaitable[Told]]  # stops the booking; what the stopper was told


def recorded(call_id: str) -> Record:
    row = ToolSession.objects.get(pk=call_id)
    steps = list(
        JournalRecord.objects.filter(session_id=call_id, kind="step").values_list("key", flat=True)
    )
    paid = ElicitLink.objects.filter(call_id=call_id, key="payment", completed_at__isnull=False)
    booked = row.result.get("booked") if isinstance(row.result, dict) else None
    return Record(
        call_id,
        paid.exists(),
        steps.count("issue_ticket"),
        steps.count("compensate_payment"),
        row.status,
        row.commitment,
        booked,
    )


async def race(url: str, stop: Stop, offset: float) -> tuple[bool, Told]:
    """POST the payment page at ``url`` and stop the booking ``offset`` seconds later (or
    earlier); whether the page said "Payment received", and what the stopper was told."""
    path = urlsplit(url).path
    browser = AsyncClient()
    assert (await browser.get(path)).status_code == 200

    async def pay() -> bool:
        page = await browser.post(path, TEST_CARD)
        said = page.content.decode()
        assert page.status_code in (200, 410), said[:300]
        return page.status_code == 200 and "Payment received" in said

    async def stop_after(delay: float) -> Told:
        await asyncio.sleep(delay)
        return await stop()

    async def pay_after(delay: float) -> bool:
        await asyncio.sleep(delay)
        return await pay()

    paid, told = await asyncio.gather(pay_after(max(-offset, 0)), stop_after(max(offset, 0)))
    return paid, told


# -- the chat: its Abort, an operator, expiry --------------------------------------------------


async def chat_to_payment(chat: ChatClient) -> dict[str, Any]:
    await chat.send_user("Book a flight from JFK to LAX")
    flights = await chat.next("elicit", key="pick_flight")
    flight_id = flights["context"]["flights"][0]["id"]
    await chat.answer(flights, flight_id=flight_id)
    seats = await chat.next("elicit", key="pick_seat")
    await chat.answer(seats, **free_seat(flight_id))
    review = await chat.next("elicit", key="review")
    await chat.answer(review, confirm=True)
    return await chat.next("elicit", key="payment")


async def ended(chat: ChatClient) -> dict[str, Any]:
    while True:
        event = await chat.next("tool_call", timeout=15)
        if event["status"] != "running":
            return event


@pytest.mark.parametrize("path", ["chat", "operator", "expiry"])
async def test_a_paid_chat_booking_is_always_ticketed_or_refunded(
    path: str, fresh_runtime: ChatBridgeRuntime
) -> None:
    tally = Tally()
    for offset in offsets():
        replies: list[str] = []  # what an operator was told
        chat = await ChatClient.start()
        try:
            payment = await chat_to_payment(chat)
            call_id = payment["call_id"]

            async def stop(
                chat: ChatClient = chat, call_id: str = call_id, replies: list[str] = replies
            ) -> Told:
                if path == "chat":
                    await chat.send({"type": "abort", "session_id": call_id, "reason": "race"})
                    return None  # what it was told comes on the socket (below)
                if path == "operator":
                    row = await ToolSession.objects.aget(pk=call_id)
                    said = await sync_to_async(abort_tool_session)(row, operator="ops")
                    replies.append(said)
                    if "was not stopped" in said or "was not marked aborted" in said:
                        return "committed"
                    return "stopped" if "aborted" in said else None
                session = fresh_runtime.manager.get(call_id)
                if session is not None:
                    await session.expire()  # what the idle reaper does
                return None

            page_paid, told = await race(payment["url"], stop, offset)
            end = await ended(chat)
            await chat.turn_done()
            await flush()
            if path == "chat":
                refusals = [e for e in chat.events if e["type"] == "error"]
                if any(e["code"] == "COMMITTED" for e in refusals):
                    told = "committed"
                    # The card says the payment kept the booking going.
                    assert (
                        end["status"] != "completed" or "could not be stopped" in end["commitment"]
                    )
                elif end["status"] == "aborted":
                    told = "stopped"
            record = await sync_to_async(recorded)(call_id)
            tally.add(record, page_paid, told, " / ".join(replies))
        finally:
            await chat.close()
    logging.getLogger("races").warning("chat %s: %s", path, dict(tally.outcomes))
    assert tally.inconsistent == []
    assert tally.outcomes["paid and ticketed"] and tally.outcomes["stopped before payment"]


# -- MCP (legacy push, the official Python SDK client): cancel, and the client going away ----


class Person:
    """Answers book_flight's form questions like a person; consents to the payment page."""

    def __init__(self) -> None:
        self.links: asyncio.Queue[str] = asyncio.Queue()
        self.logs: list[Any] = []
        self.logged = asyncio.Event()

    async def elicit(self, context: Any, params: Any) -> types.ElicitResult:
        if isinstance(params, types.ElicitRequestURLParams):
            self.links.put_nowait(params.url)
            return types.ElicitResult(action="accept")
        schema = params.requested_schema or {}
        context_data = schema.get("x-model-context") or {}
        if "flights" in context_data:
            content: dict[str, Any] = {"flight_id": context_data["flights"][0]["id"]}
        elif "seat_map" in context_data:
            content = free_seat(context_data["seat_map"]["flight_id"])
        else:
            content = {"confirm": True}
        return types.ElicitResult(action="accept", content=content)

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)
        if isinstance(params.data, dict) and "commitment" in params.data:
            self.logged.set()


@pytest.mark.parametrize("path", ["mcp-cancel", "mcp-client-gone"])
async def test_a_paid_mcp_booking_is_always_ticketed_or_refunded(
    path: str, fresh_runtime: ChatBridgeRuntime
) -> None:
    tally = Tally()
    for offset in offsets():
        person = Person()
        call_id, page_paid, told = await mcp_trial(fresh_runtime, person, path, offset)
        tally.add(await sync_to_async(recorded)(call_id), page_paid, told)
    logging.getLogger("races").warning("%s: %s", path, dict(tally.outcomes))
    assert tally.inconsistent == []
    assert tally.outcomes["paid and ticketed"] and tally.outcomes["stopped before payment"]


async def mcp_trial(
    runtime: ChatBridgeRuntime, person: Person, path: str, offset: float
) -> tuple[str, bool, Told]:
    """One booking by a legacy client that cancels its call (or goes away) as the page pays."""
    gone = asyncio.Event()
    calls: asyncio.Queue[asyncio.Task[Any]] = asyncio.Queue()

    async def client_side() -> None:  # the client lives and leaves in a task of its own
        async with Client(
            runtime.mcp.bridge.server,
            mode="legacy",
            elicitation_callback=person.elicit,
            logging_callback=person.log,
        ) as client:
            route = {"origin": "JFK", "destination": "LAX"}
            calls.put_nowait(asyncio.create_task(client.call_tool("book_flight", route)))
            await gone.wait()

    client = asyncio.create_task(client_side())
    call = await asyncio.wait_for(calls.get(), 15)
    url = await asyncio.wait_for(person.links.get(), 15)
    [session] = [
        s
        for i in runtime.manager.list_active()
        if (s := runtime.manager.get(i.id)) is not None and s.tool_name == "book_flight"
    ]

    async def stop() -> Told:
        if path == "mcp-cancel":
            call.cancel()  # the SDK sends notifications/cancelled
            with contextlib.suppress(asyncio.CancelledError):
                await call
        else:
            gone.set()
            await client
        return None

    try:
        page_paid, _ = await race(url, stop, offset)
        await asyncio.wait_for(session.wait_finished(), 15)
        await flush()
        told: Told = None
        if path == "mcp-cancel" and page_paid and session.abort_requested is not None:
            # The cancelled request has no response: a log notification tells the client.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(person.logged.wait(), 5)
            said = [str(d.get("message")) for d in person.logs if isinstance(d, dict)]
            told = "committed" if any("already received" in m for m in said) else "stopped"
    finally:
        gone.set()
        with contextlib.suppress(Exception):
            await client
    return session.id, page_paid, told
