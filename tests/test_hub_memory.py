"""The hub keeps nothing for a conversation once nothing runs or waits in it (issue 13, 9)."""

from __future__ import annotations

import asyncio
import gc
import secrets
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest

from chatbridge import PluginRegistry, SessionManager
from chatbridge.author.exceptions import CommandRefused
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.calls.links import MemoryUrlLinks
from chatbridge.engine.conversation import LiveConversation
from chatbridge.engine.engine import ChatHub
from chatbridge.engine.protocol import ChatEvent, ElicitForm, ElicitResponseCommand, ToolCallEvent
from plugins.book_flight.data import seat_map_for
from plugins.book_flight.plugin import book_flight_plugin
from plugins.book_flight.tool import PaymentDone

CONVERSATIONS = 1000
AT_ONCE = 50


class MemoryStore:
    """Messages in a dict; nothing survives (no resumable calls)."""

    def __init__(self) -> None:
        self.messages_by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)

    async def messages(self, conversation_id: str) -> list[dict[str, Any]]:
        return [dict(m) for m in self.messages_by_conv[conversation_id]]

    async def append(
        self, conversation_id: str, message_id: str, message: dict[str, Any], *, wait: bool = True
    ) -> None:
        self.messages_by_conv[conversation_id].append(message)

    async def save_phase(self, conversation_id: str, phase: Any) -> None:
        return None

    async def fork(
        self, conversation_id: str, message_id: str, *, edit: bool
    ) -> tuple[list[str], list[str]]:
        raise CommandRefused("BAD_COMMAND", "this store keeps no message ids: no forks")

    async def resumable(self, conversation_id: str) -> list[Any]:
        return []

    async def claim(self, call_id: str, worker: str) -> bool:
        return False


class Inboxes:
    """Each conversation's events, as a queue a test awaits (no polling)."""

    def __init__(self) -> None:
        self.queues: dict[str, asyncio.Queue[ChatEvent]] = defaultdict(asyncio.Queue)

    async def sink(self, conversation_id: str, event: ChatEvent) -> None:
        self.queues[conversation_id].put_nowait(event)

    async def next(self, conversation_id: str, kind: str, **match: Any) -> Any:
        queue = self.queues[conversation_id]
        while True:
            event = await asyncio.wait_for(queue.get(), 30)
            if event.type == kind and all(getattr(event, k) == v for k, v in match.items()):
                return event


@pytest.fixture
async def hub() -> AsyncIterator[tuple[ChatHub, SessionManager, Inboxes, MemoryUrlLinks]]:
    inboxes = Inboxes()

    def render(
        request: Any, template_name: str, context: Any, errors: Any, *, session_id: str
    ) -> str:
        return ""

    links = MemoryUrlLinks()  # book_flight's payment question has a link; its page is played
    manager = SessionManager(sampler=LiteLLMSampler("offline/memory"), url_links=links)
    chat = ChatHub(
        registry=PluginRegistry([book_flight_plugin]),
        manager=manager,
        store=MemoryStore(),
        sink=inboxes.sink,
        render_form=render,
        model="offline/memory",
    )
    yield chat, manager, inboxes, links
    await chat.close()
    await manager.shutdown()


def answer(form: ElicitForm, **content: Any) -> ElicitResponseCommand:
    return ElicitResponseCommand(
        type="elicit_response",
        session_id=form.session_id,
        call_id=form.call_id,
        elicit_id=form.elicit_id,
        content=content,
    )


async def pay(links: MemoryUrlLinks, url: str | None, manager: SessionManager) -> None:
    """What book_flight's payment page does once a test card went through: report a token and
    the last four digits for the question behind ``url``."""
    assert url is not None
    token = url.rstrip("/").rsplit("/", 1)[-1]
    paid = PaymentDone(payment_token=secrets.token_urlsafe(24), last4="4242")
    await links.complete(token, paid, manager)


def runtimes_alive(prefix: str) -> int:
    """Conversation states of this test's conversations still in memory (other tests of the
    process may leave theirs to the garbage collector)."""
    gc.collect()
    return sum(
        isinstance(o, LiveConversation) and o.id.startswith(prefix) for o in gc.get_objects()
    )


async def test_viewing_conversations_keeps_nothing(hub: Any) -> None:
    chat, _, _, _ = hub
    for n in range(CONVERSATIONS):
        conversation_id = f"viewed-{n}"
        state = chat.state(conversation_id)
        assert (state.phase, state.running, state.pending) == ("idle", False, [])
        assert chat.pending_forms(conversation_id) == []
        assert await chat.recover(conversation_id) is False  # what a connecting socket does
    assert chat.held() == 0
    assert runtimes_alive("viewed-") == 0


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_thousand_bookings_leave_the_hub_holding_nothing(hub: Any) -> None:
    chat, manager, inboxes, links = hub
    tickets: list[str] = []

    async def book(conversation_id: str) -> None:
        await chat.user_message(conversation_id, "Book a flight from JFK to LAX")
        flights = await inboxes.next(conversation_id, "elicit", key="pick_flight")
        assert chat.state(conversation_id).pending == [flights.call_id]  # held while it waits
        flight_id = flights.context["flights"][0]["id"]
        await chat.elicit_response(conversation_id, answer(flights, flight_id=flight_id))
        seats = await inboxes.next(conversation_id, "elicit", key="pick_seat")
        label = seat_map_for(flight_id).first_free()
        await chat.elicit_response(conversation_id, answer(seats, seat_label=label))
        review = await inboxes.next(conversation_id, "elicit", key="review")
        await chat.elicit_response(conversation_id, answer(review, confirm=True))
        payment = await inboxes.next(conversation_id, "elicit", key="payment")
        await pay(links, payment.url, manager)
        done: ToolCallEvent = await inboxes.next(conversation_id, "tool_call", status="completed")
        assert done.result is not None and done.result["booked"] is True
        tickets.append(done.result["ticket"])
        await chat.wait_idle(conversation_id)
        chat.state(conversation_id)  # a socket reconnecting afterwards
        chat.pending_forms(conversation_id)
        inboxes.queues.pop(conversation_id)

    gate = asyncio.Semaphore(AT_ONCE)

    async def one(n: int) -> None:
        async with gate:
            await book(f"booked-{n}")

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(CONVERSATIONS)))
    elapsed = time.perf_counter() - started
    print(f"\n{CONVERSATIONS} bookings in process: {elapsed:.1f} s")

    assert len(tickets) == len(set(tickets)) == CONVERSATIONS
    assert chat.held() == 0
    assert len(manager) == 0
    assert runtimes_alive("booked-") == 0
