"""A visitor flooding the "Send anyway" queue from several sockets, as fast as each socket's
rate limit lets it, with messages of the largest size allowed: everything past the caps is
refused, the queue holds exactly the cap, and another person's booking steps keep their pace
(measured against the same steps without the flood, in the same run) while new sockets still
connect."""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.test import override_settings

from chatbridge.engine.protocol import MAX_USER_MESSAGE
from chatbridge.records.models import QueueEntry
from tests.chat_client import ChatClient, new_browser_session, new_conversation

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fresh_runtime"),
    pytest.mark.slow,
    pytest.mark.timeout(180),
]

BOOK = "Book a flight from JFK to LAX"
PER_CONVERSATION, PER_VISITOR = 20, 50
CONVERSATIONS, SOCKETS_EACH = 3, 2  # the flooder's chats, each with a booking waiting
BURST, RATE = 30, 10.0  # each socket sends as the default limits let one visitor send
STEPS = 15  # booking steps measured in each phase, at least
QUIET_SECONDS = 3.0  # each phase takes steps for at least this long: before and after the
FLOOD_SECONDS = 5.0  # flood, and during it (similar samples of a machine's changing load)
SLOWDOWN = 3.0  # a booking step under the flood takes at most this many times its quiet p50


@dataclass
class Flooder:
    """One socket of the flooding visitor: what it sent and what came back for it."""

    chat: ChatClient
    sent: list[str] = field(default_factory=list)
    queued: set[str] = field(default_factory=set)
    refusals: dict[str, int] = field(default_factory=dict)

    @property
    def answered(self) -> int:
        return len(self.queued) + sum(self.refusals.values())

    async def read(self) -> None:
        while True:
            event = json.loads(await self.chat.socket.receive_from(timeout=120))
            if event["type"] == "message_queued" and event["client_id"] in self.sent:
                self.queued.add(event["client_id"])
            elif event["type"] == "error":
                self.refusals[event["code"]] = self.refusals.get(event["code"], 0) + 1

    async def send(self, stop: asyncio.Event, n: int) -> None:
        """The burst at once, then just under the steady rate (so the rate limit lets every
        message through: each costs the server a full enqueue attempt)."""
        while not stop.is_set():
            client_id = f"f{n}-{len(self.sent)}"
            self.sent.append(client_id)
            text = "x" * MAX_USER_MESSAGE
            await self.chat.send(
                {"type": "user_message", "text": text, "client_id": client_id, "queue": True}
            )
            if len(self.sent) >= BURST:
                await asyncio.sleep(1.2 / RATE)  # load generation, not synchronisation
            else:
                await asyncio.sleep(0)


def refusals(flooders: list[Flooder]) -> int:
    return sum(sum(f.refusals.values()) for f in flooders)


async def booking_step(victim: ChatClient) -> float:
    """One booking step: the time from answering the flight question to the seat question."""
    await victim.send_user(BOOK)
    flights = await victim.next("elicit", key="pick_flight")
    started = time.perf_counter()
    await victim.answer(flights, flight_id=flights["context"]["flights"][0]["id"])
    seats = await victim.next("elicit", key="pick_seat")
    took = time.perf_counter() - started
    await victim.answer(seats, action="cancel")
    await victim.next("conversation_state", phase="done", running=False, timeout=20)
    return took


async def steps(victim: ChatClient, seconds: float) -> list[float]:
    """Booking steps, one after the other, for ``seconds`` and ``STEPS`` steps at least."""
    took: list[float] = []
    started = time.perf_counter()
    while len(took) < STEPS or time.perf_counter() - started < seconds:
        took.append(await booking_step(victim))
    return took


async def until(condition: Any, timeout: float = 30) -> None:
    async def wait() -> None:
        while not await condition():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(wait(), timeout)


@override_settings(
    CHATBRIDGE_QUEUE_PER_CONVERSATION=PER_CONVERSATION, CHATBRIDGE_QUEUE_PER_VISITOR=PER_VISITOR
)
async def test_a_flooding_visitor_is_refused_and_does_not_slow_anyone_else() -> None:
    # The person being measured books faster than anyone clicks: their socket's own rate
    # limit is not what this measures. The flooder's sockets have the default limits.
    with override_settings(CHATBRIDGE_WS_RATE=1000.0, CHATBRIDGE_WS_BURST=1000.0):
        victim = await ChatClient.start()
    flooder_key = await new_browser_session()
    owner = f"session:{flooder_key}"
    flooders: list[Flooder] = []
    readers: list[asyncio.Task[None]] = []
    # The visitor's sockets share one rate: it is lifted to what they send together, so that
    # every message costs the server a full enqueue attempt (what this measures).
    sockets = CONVERSATIONS * SOCKETS_EACH
    shared = override_settings(
        CHATBRIDGE_WS_RATE=RATE * sockets, CHATBRIDGE_WS_BURST=BURST * sockets
    )
    try:
        for _ in range(CONVERSATIONS):  # each chat has a booking waiting: messages queue
            with shared:
                chat = ChatClient(await new_conversation(flooder_key), flooder_key)
                await chat.connect()
            await chat.send_user(BOOK)
            await chat.next("elicit", key="pick_flight")
            flooders.append(Flooder(chat))
            for _ in range(SOCKETS_EACH - 1):
                more = ChatClient(chat.conversation_id, flooder_key)
                with shared:
                    await more.connect()
                flooders.append(Flooder(more))
        readers = [asyncio.create_task(f.read()) for f in flooders]

        quiet = await steps(victim, QUIET_SECONDS)

        stop = asyncio.Event()
        started_cpu, started = time.process_time(), time.perf_counter()
        senders = [asyncio.create_task(f.send(stop, n)) for n, f in enumerate(flooders)]

        async def full() -> bool:
            return await QueueEntry.objects.filter(owner=owner).acount() >= PER_VISITOR

        await until(full)
        # What a refused message costs (the flood alone; the test's own clients included).
        refused_before, cpu_before = refusals(flooders), time.process_time()

        async def sixty_more() -> bool:
            return refusals(flooders) >= refused_before + 60

        await until(sixty_more)
        per_refusal = (time.process_time() - cpu_before) / (refusals(flooders) - refused_before)
        flooded = await steps(victim, FLOOD_SECONDS)
        key = await new_browser_session()  # a new visitor's socket connects during the flood
        newcomer = ChatClient(await new_conversation(key), key)
        await newcomer.connect()
        assert (await newcomer.next("conversation_state", timeout=5))["running"] is False
        await newcomer.close()
        stop.set()
        await asyncio.gather(*senders)
        flood_seconds = time.perf_counter() - started
        flood_cpu = time.process_time() - started_cpu

        async def all_answered() -> bool:
            return all(f.answered == len(f.sent) for f in flooders)

        await until(all_answered)
        # Quiet steps before and after the flood: a drift of the machine's load between the
        # phases does not pass for the flood's effect.
        quiet += await steps(victim, QUIET_SECONDS)
        sent = sum(len(f.sent) for f in flooders)
        refused = sum(f.refusals.get("QUEUE_FULL", 0) for f in flooders)
        quiet_p50, flooded_p50 = statistics.median(quiet), statistics.median(flooded)
        print(
            f"\nflood: {sent} messages of {MAX_USER_MESSAGE} characters from {len(flooders)} "
            f"sockets in {flood_seconds:.1f}s, {refused} refused; process CPU "
            f"{flood_cpu:.2f}s ({1000 * flood_cpu / sent:.2f} ms per message, victim included; "
            f"{1000 * per_refusal:.2f} ms per refused message, flood alone); "
            f"{len(flooded)} booking steps, p50 quiet {1000 * quiet_p50:.1f} ms, flooded "
            f"{1000 * flooded_p50:.1f} ms (x{flooded_p50 / quiet_p50:.2f}), flooded max "
            f"{1000 * max(flooded):.1f} ms"
        )
        assert {code for f in flooders for code in f.refusals} == {"QUEUE_FULL"}
        assert sum(len(f.queued) for f in flooders) == PER_VISITOR
        assert refused == sent - PER_VISITOR
        assert await QueueEntry.objects.filter(owner=owner).acount() == PER_VISITOR
        assert await QueueEntry.objects.exclude(owner=owner).acount() == 0

        assert flooded_p50 <= SLOWDOWN * quiet_p50, (quiet, flooded)
    finally:
        for reader in readers:
            reader.cancel()
        for f in flooders:
            with contextlib.suppress(Exception):
                await f.chat.close()
        await victim.close()
