"""Messages sent while a turn runs (queued as the next turn, durably) and stopping a reply
being written: the engine's part, without a browser."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from chatbridge import PluginRegistry, SessionManager
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.engine.engine import ChatHub, CommandRefused
from chatbridge.engine.protocol import (
    ChatEvent,
    ElicitResponseCommand,
    UserMessageCommand,
    parse_command,
)
from chatbridge.engine.turns import LocalQueue, MessageQueue, QueuedMessage
from plugins.book_flight.plugin import book_flight_plugin
from tests.test_engine import MemoryStore, first_event

BOOK = "Book a flight from JFK to LAX"


async def make_hub(
    events: list[ChatEvent], store: MemoryStore, queue: MessageQueue
) -> tuple[ChatHub, SessionManager]:
    async def sink(conversation_id: str, event: ChatEvent) -> None:
        events.append(event)

    def render(
        request: Any, template_name: str, context: dict[str, Any], errors: Any, *, session_id: str
    ) -> str:
        return f"<form>{template_name}</form>"

    manager = SessionManager(sampler=LiteLLMSampler("offline/engine"))
    hub = ChatHub(
        registry=PluginRegistry([book_flight_plugin]),
        manager=manager,
        store=store,
        sink=sink,
        render_form=render,
        model="offline/engine",
        queue=queue,
    )
    return hub, manager


@pytest.fixture
async def hub() -> AsyncIterator[tuple[ChatHub, MemoryStore, list[ChatEvent], LocalQueue]]:
    events: list[ChatEvent] = []
    store, queue = MemoryStore(), LocalQueue()
    chat, manager = await make_hub(events, store, queue)
    yield chat, store, events, queue
    await chat.close()
    await manager.shutdown()


def cancel(form: Any) -> ElicitResponseCommand:
    return ElicitResponseCommand(
        type="elicit_response",
        session_id=form.session_id,
        call_id=form.call_id,
        elicit_id=form.elicit_id,
        action="cancel",
    )


async def until(condition: Any, timeout: float = 10) -> None:
    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(wait(), timeout)


def test_the_user_message_command_takes_a_client_id_and_queue_and_stop_is_a_command() -> None:
    old = parse_command({"type": "user_message", "text": "hi"})  # API clients: unchanged
    assert isinstance(old, UserMessageCommand)
    assert (old.client_id, old.queue) == (None, False)
    new = parse_command({"type": "user_message", "text": "hi", "client_id": "x1", "queue": True})
    assert isinstance(new, UserMessageCommand)
    assert (new.client_id, new.queue) == ("x1", True)
    assert parse_command({"type": "stop"}).type == "stop"


async def test_a_message_sent_during_a_question_is_queued_and_starts_the_next_turn(
    hub: Any,
) -> None:
    chat, store, events, queue = hub
    await chat.user_message("conv", BOOK, client_id="first")
    echo = await first_event(events, "user_message")
    assert (echo.content, echo.client_id) == (BOOK, "first")
    form = await first_event(events, "elicit")

    with pytest.raises(CommandRefused) as busy:  # not asked to queue: refused, as before
        await chat.user_message("conv", "hello")
    assert busy.value.code == "BUSY"

    await chat.user_message("conv", "hello", client_id="second", queue=True)
    queued = await first_event(events, "message_queued")
    assert (queued.content, queued.client_id) == ("hello", "second")
    assert [m.text for m in await queue.queued("conv")] == ["hello"]
    assert [m["content"] for m in store.messages_by_conv["conv"] if m["role"] == "user"] == [BOOK]

    await chat.elicit_response("conv", cancel(form))  # the booking's turn ends ...
    await until(lambda: len([e for e in events if e.type == "user_message"]) == 2)
    started = [e for e in events if e.type == "user_message"][1]
    assert (started.message_id, started.client_id) == (queued.message_id, "second")
    await chat.wait_idle("conv")
    await until(lambda: chat.state("conv").phase in ("idle", "done"))
    roles = [(m["role"], m["content"]) for m in store.messages_by_conv["conv"]]
    # ... and the queued message comes after that turn's reply, then gets its own.
    assert roles[-2][0] == "user" and roles[-2][1] == "hello"
    assert roles[-1][0] == "assistant" and roles[-3][0] == "assistant"
    assert await queue.queued("conv") == []


class SlowQueue(LocalQueue):
    """A queue whose writes take until ``written`` is set (a database write in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = asyncio.Event()
        self.written = asyncio.Event()

    async def enqueue(self, conversation_id: str, message: QueuedMessage) -> None:
        self.writing.set()
        await self.written.wait()
        await super().enqueue(conversation_id, message)


async def test_a_message_queued_as_the_turn_ends_runs_in_the_conversation_shown() -> None:
    """The turn ends while the queued message is being written (it finds nothing queued yet):
    the message's own command starts its turn, and that turn is the conversation's live one:
    the page's state shows its question, and the answer to it reaches it."""
    events: list[ChatEvent] = []
    store, queue = MemoryStore(), SlowQueue()
    chat, manager = await make_hub(events, store, queue)
    try:
        await chat.user_message("conv", BOOK)
        form = await first_event(events, "elicit")
        sending = asyncio.create_task(chat.user_message("conv", BOOK, queue=True))
        await queue.writing.wait()  # refused as busy; being queued ...
        await chat.elicit_response("conv", cancel(form))  # ... as the first turn ends
        await chat.wait_idle("conv")
        queue.written.set()
        await sending
        await until(lambda: len([e for e in events if e.type == "elicit"]) == 2)
        second = [e for e in events if e.type == "elicit"][1]
        state = chat.state("conv")
        assert (state.running, state.phase, state.pending) == (
            True,
            "plugin_awaiting_elicit",
            [second.call_id],
        )
        await chat.elicit_response("conv", cancel(second))
        await chat.wait_idle("conv")
        results = [m for m in store.messages_by_conv["conv"] if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in results] == [form.call_id, second.call_id]
        replies = [m for m in store.messages_by_conv["conv"] if m["role"] == "assistant"]
        assert "I can use these tools" not in str(replies[-1]["content"])
        assert [e.code for e in events if e.type == "error"] == []
    finally:
        await chat.close()
        await manager.shutdown()


async def test_a_queued_message_left_by_a_restart_starts_when_a_socket_connects() -> None:
    events: list[ChatEvent] = []
    store, queue = MemoryStore(), LocalQueue()
    await queue.enqueue("conv", QueuedMessage("m1", "hello", "c1"))  # on record, no turn runs
    chat, manager = await make_hub(events, store, queue)
    try:
        await chat.recover("conv")
        echo = await first_event(events, "user_message")
        assert (echo.message_id, echo.content, echo.client_id) == ("m1", "hello", "c1")
        await chat.wait_idle("conv")
        assert await queue.queued("conv") == []
        assert store.messages_by_conv["conv"][0] == {"role": "user", "content": "hello"}
    finally:
        await chat.close()
        await manager.shutdown()


async def test_stop_keeps_what_was_shown_as_the_reply(
    hub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATBRIDGE_OFFLINE_STREAM_DELAY", "0.05")
    chat, store, events, _ = hub
    await chat.stop("conv")  # nothing streaming: nothing happens
    await chat.user_message("conv", "hello")
    await first_event(events, "assistant_delta")
    await until(lambda: len([e for e in events if e.type == "assistant_delta"]) >= 2)
    await chat.stop("conv")
    final = await first_event(events, "assistant_message")
    await chat.wait_idle("conv")
    shown = "".join(e.delta for e in events if e.type == "assistant_delta")
    assert final.stopped is True
    assert final.content == shown and shown
    stored = store.messages_by_conv["conv"][-1]
    assert stored == {"role": "assistant", "content": shown, "stopped": True}
    assert len(shown.split()) < 20  # the offline help is much longer: it was cut short


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_runtime")
async def test_the_django_store_keeps_the_queue_on_record() -> None:
    from asgiref.sync import sync_to_async

    from chatbridge.records.models import Conversation, QueueEntry
    from chatbridge.records.store import DjangoStore

    conversation = await sync_to_async(Conversation.objects.create)(owner="session:x")
    cid = str(conversation.id)
    store = DjangoStore()
    await store.enqueue(cid, QueuedMessage("a", "first", None))
    await store.enqueue(cid, QueuedMessage("b", "second", "c2"))
    assert [(m.id, m.text, m.client_id) for m in await store.queued(cid)] == [
        ("a", "first", None),
        ("b", "second", "c2"),
    ]
    await store.dequeue(cid, "a")
    await store.dequeue(cid, "a")  # twice: nothing more happens
    assert [m.id for m in await store.queued(cid)] == ["b"]
    rows = QueueEntry.objects.filter(conversation_id=cid).values_list("message_id", "text")
    assert [r async for r in rows] == [("b", "second")]


async def test_stop_reaches_the_worker_running_the_turn() -> None:
    from chatbridge.engine.conversation import LocalLeases

    forwarded: list[tuple[str, str, Any]] = []

    class Elsewhere(LocalLeases):
        async def turn_holder(self, conversation_id: str) -> str:
            return "worker-2"

    class Peers:
        async def alive(self, worker: str) -> bool:
            return True

        async def route(self, worker: str, conversation_id: str, command: Any) -> None:
            return None

        async def show(self, worker: str, conversation_id: str) -> None:
            return None

        async def forward(self, worker: str, conversation_id: str, command: Any) -> dict[str, Any]:
            forwarded.append((worker, conversation_id, command))
            return {"ok": True}

    async def sink(conversation_id: str, event: ChatEvent) -> None:
        return None

    manager = SessionManager()
    hub = ChatHub(
        registry=PluginRegistry([]),
        manager=manager,
        store=MemoryStore(),
        sink=sink,
        render_form=lambda *a, **k: "",
        model="offline/engine",
        peers=Peers(),
        leases=Elsewhere(),
    )
    try:
        await hub.stop("conv")  # nothing streams here: the turn's worker is asked
        assert [(w, c, cmd.type) for w, c, cmd in forwarded] == [("worker-2", "conv", "stop")]
        await hub.stop("conv", routed=True)  # came from another worker: not passed on again
        assert len(forwarded) == 1
    finally:
        await hub.close()
        await manager.shutdown()


async def test_an_answer_for_a_call_live_here_never_starts_a_second_run_of_it(hub: Any) -> None:
    """Defence in depth: should an answer ever reach a conversation state that does not hold
    its call (the defect above), the call still running in this process is not taken for an
    orphan: no turn starts to resume it, the answer is refused as not open, and the question
    still waits for its real answer."""
    chat, store, events, _ = hub
    await chat.user_message("conv", BOOK)
    form = await first_event(events, "elicit")
    live = chat._conversations.pop("conv")  # the state that holds the call, out of reach
    with pytest.raises(CommandRefused) as refused:
        await chat.elicit_response("conv", cancel(form))
    assert refused.value.code == "NOT_WAITING"
    await chat.wait_idle("conv")  # nothing was started in the stray state
    chat._conversations["conv"] = live
    await chat.elicit_response("conv", cancel(form))
    await chat.wait_idle("conv")
    messages = store.messages_by_conv["conv"]
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == [form.call_id]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert [e.code for e in events if e.type == "error"] == []
