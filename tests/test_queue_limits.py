"""The queue of "Send anyway" messages: one row per message (an enqueue is one INSERT, however
long the queue), bounded per chat, per visitor and per client address (fresh cookies from one
address share its cap) with a refusal that says so, shown after a reload, and moved out of the
old JSON column by the migration."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from chatbridge.engine.engine import CommandRefused
from chatbridge.engine.turns import LocalQueue, QueuedMessage, queue_full
from chatbridge.records import store as chat_store
from chatbridge.records.models import Conversation, QueueEntry
from chatbridge.records.store import DjangoStore
from tests.chat_client import ChatClient

BOOK = "Book a flight from JFK to LAX"

FULL_HERE = (
    "3 messages are already waiting in this chat, the most it keeps. Wait for the current "
    "reply to end, then send this again."
)
FULL_VISITOR = (
    "You have 5 messages waiting in your chats, the most we keep for you. Wait for the "
    "current replies to end, then send this again."
)


@pytest.mark.django_db(transaction=True)
@override_settings(CHATBRIDGE_QUEUE_PER_CONVERSATION=100, CHATBRIDGE_QUEUE_PER_VISITOR=100)
def test_an_enqueue_is_one_insert_however_long_the_queue() -> None:
    conversation = Conversation.objects.create(owner="session:o1")
    statements: list[list[str]] = []
    for i in range(30):
        with CaptureQueriesContext(connection) as captured:
            chat_store._enqueue(str(conversation.id), QueuedMessage(f"m{i}", "x" * 4000, None))
        statements.append([q["sql"].split()[0].upper() for q in captured.captured_queries])
    assert statements[0] == statements[-1]  # the 30th costs what the first did
    assert statements[0].count("INSERT") == 1
    assert "UPDATE" not in statements[0] and "DELETE" not in statements[0]
    assert QueueEntry.objects.filter(conversation=conversation).count() == 30


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_runtime")
@override_settings(CHATBRIDGE_QUEUE_PER_CONVERSATION=3, CHATBRIDGE_QUEUE_PER_VISITOR=5)
async def test_the_queue_is_bounded_per_chat_and_per_visitor_with_a_clear_refusal() -> None:
    store = DjangoStore()
    a, b, c = [str((await Conversation.objects.acreate(owner="session:v")).id) for _ in "abc"]
    other = str((await Conversation.objects.acreate(owner="session:someone-else")).id)
    for i in range(3):
        await store.enqueue(a, QueuedMessage(f"a{i}", f"a{i}"))
    with pytest.raises(CommandRefused) as here:
        await store.enqueue(a, QueuedMessage("a3", "a3"))
    assert (here.value.code, str(here.value)) == ("QUEUE_FULL", FULL_HERE)
    await store.enqueue(b, QueuedMessage("b0", "b0"))
    await store.enqueue(b, QueuedMessage("b1", "b1"))
    with pytest.raises(CommandRefused) as visitor:
        await store.enqueue(c, QueuedMessage("c0", "c0"))
    assert (visitor.value.code, str(visitor.value)) == ("QUEUE_FULL", FULL_VISITOR)
    for i in range(3):  # another visitor is not held back by this one
        await store.enqueue(other, QueuedMessage(f"o{i}", "mine"))
    # Nothing refused was kept; one message out of the queue makes room for one.
    assert [m.id for m in await store.queued(a)] == ["a0", "a1", "a2"]
    assert await store.queued(c) == []
    await store.dequeue(a, "a1")
    await store.enqueue(c, QueuedMessage("c0", "c0"))
    assert [m.id for m in await store.queued(c)] == ["c0"]
    assert [m.id for m in await store.queued(a)] == ["a0", "a2"]


FULL_NETWORK = (
    "4 messages from your network are waiting in chats, the most we keep for it. Wait for the "
    "current replies to end, then send this again."
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_runtime")
@override_settings(
    CHATBRIDGE_QUEUE_PER_CONVERSATION=100,
    CHATBRIDGE_QUEUE_PER_VISITOR=100,
    CHATBRIDGE_QUEUE_PER_ADDRESS=4,
)
async def test_fresh_cookies_from_one_address_share_its_cap_on_the_queue() -> None:
    store = DjangoStore()
    home, elsewhere = "203.0.113.7", "198.51.100.20"
    chats = [
        str((await Conversation.objects.acreate(owner=f"session:fresh{n}")).id) for n in range(6)
    ]
    for n, chat in enumerate(chats[:4]):  # a new cookie for each message
        await store.enqueue(chat, QueuedMessage(f"h{n}", "hi", address=home))
    with pytest.raises(CommandRefused) as refused:
        await store.enqueue(chats[4], QueuedMessage("h4", "hi", address=home))
    assert (refused.value.code, str(refused.value)) == ("QUEUE_FULL", FULL_NETWORK)
    await store.enqueue(chats[5], QueuedMessage("e0", "hi", address=elsewhere))
    assert await store.queued(chats[4]) == []
    await store.dequeue(chats[0], "h0")  # one started: room for one more
    await store.enqueue(chats[4], QueuedMessage("h4", "hi", address=home))
    assert [m.id for m in await store.queued(chats[4])] == ["h4"]


def test_the_refusals_count_in_words() -> None:
    assert str(queue_full(1)).startswith("1 message is already waiting in this chat")
    assert str(queue_full(1, visitor=True)).startswith("You have 1 message waiting in your")


async def test_the_in_memory_queue_is_bounded_per_chat_too() -> None:
    queue = LocalQueue(per_conversation=3)
    for i in range(3):
        await queue.enqueue("conv", QueuedMessage(f"m{i}", "hi"))
    with pytest.raises(CommandRefused) as full:
        await queue.enqueue("conv", QueuedMessage("m3", "hi"))
    assert (full.value.code, str(full.value)) == ("QUEUE_FULL", FULL_HERE)
    assert len(await queue.queued("conv")) == 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_runtime")
@override_settings(CHATBRIDGE_QUEUE_PER_CONVERSATION=3)
async def test_over_the_socket_a_full_queue_refuses_and_the_queued_ones_still_start() -> None:
    chat = await ChatClient.start()
    try:
        await chat.send_user(BOOK)
        form = await chat.next("elicit", key="pick_flight")
        for i in range(4):
            await chat.send(
                {"type": "user_message", "text": f"hello {i}", "client_id": f"c{i}", "queue": True}
            )
        refused = await chat.next("error")
        assert (refused["code"], refused["message"]) == ("QUEUE_FULL", FULL_HERE)
        queued = [e for e in chat.events if e["type"] == "message_queued"]
        assert [e["client_id"] for e in queued] == ["c0", "c1", "c2"]
        await chat.answer(form, action="cancel")  # the booking's turn ends: the queue drains
        for i in range(3):
            await chat.next("user_message", content=f"hello {i}", client_id=f"c{i}")
        await chat.next("conversation_state", phase="done", running=False, timeout=20)
        assert await QueueEntry.objects.filter(conversation_id=chat.conversation_id).acount() == 0
    finally:
        await chat.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_runtime")
async def test_queued_messages_show_after_a_reload() -> None:
    browser = Client()
    page = await sync_to_async(browser.get)("/")
    assert page.status_code == 302
    conversation = await sync_to_async(browser.get)(page["Location"])
    cid = str(conversation.context["conversation"].id)
    store = DjangoStore()
    await store.enqueue(cid, QueuedMessage("q1", "first <b>one</b>", "c1"))
    await store.enqueue(cid, QueuedMessage("q2", "second", None))
    html = (await sync_to_async(browser.get)(page["Location"])).content.decode()
    first, second = html.index('id="queued-q1"'), html.index('id="queued-q2"')
    assert first < second
    assert 'data-client-id="c1"' in html and "first &lt;b&gt;one&lt;/b&gt;" in html


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_queued_messages_out_of_the_json_column() -> None:
    executor = MigrationExecutor(connection)
    app = "chatbridge_chat"
    executor.migrate([(app, "0011_queue_and_stopped")])
    old = executor.loader.project_state([(app, "0011_queue_and_stopped")]).apps
    conversation = old.get_model(app, "Conversation").objects.create(
        owner="session:old",
        queue=[
            {"id": "m1", "text": "first", "client_id": "c1"},
            {"id": "m2", "text": "second", "client_id": None},
        ],
    )
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes(app))
    rows = QueueEntry.objects.filter(conversation_id=conversation.id).order_by("pk")
    assert [(r.message_id, r.text, r.client_id, r.owner) for r in rows] == [
        ("m1", "first", "c1", "session:old"),
        ("m2", "second", "", "session:old"),
    ]
    assert "queue" not in {f.name for f in Conversation._meta.get_fields()}


@pytest.mark.django_db(transaction=True)
def test_the_admin_shows_a_chats_queued_messages() -> None:
    from django.contrib.auth.models import User

    conversation = Conversation.objects.create(owner="session:adm", title="Queued chat")
    chat_store._enqueue(str(conversation.id), QueuedMessage("q1", "waiting <i>here</i>", "c1"))
    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", password="pw-123456"))
    page = staff.get(f"/admin/chatbridge_chat/conversation/{conversation.id}/change/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "Queued messages" in html and "waiting &lt;i&gt;here&lt;/i&gt;" in html
