"""The conversation store on the database: messages in order, one running turn per
conversation across workers, the durable queue of messages sent while a turn runs, the latest
phase, calls taken over from a worker that is gone."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from chatbridge.engine.turns import QueuedMessage
from chatbridge.records.models import (
    Conversation,
    Message,
    QueueEntry,
    ToolSession,
)
from chatbridge.records.recorder import WORKER_ID
from chatbridge.records.store import (
    DjangoStore,
    owner_key,
)
from chatbridge.records.writer import flush

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]

OTHER = "elsewhere:4242"  # a worker on another host: its liveness is its heartbeat alone


async def new_conversation() -> str:
    conversation = await Conversation.objects.acreate(owner="session:store")
    return str(conversation.id)


async def test_messages_come_back_in_order_and_the_first_user_message_names_the_chat() -> None:
    store, chat = DjangoStore(), await new_conversation()
    first = "  Book   a flight\nfrom JFK to LAX " + "please " * 20
    await store.append(chat, "m1", {"role": "user", "content": first})
    await store.append(chat, "m2", {"role": "assistant", "content": "Which flight?"})
    await store.append(chat, "m3", {"role": "user", "content": "The first one"})
    assert [m["content"] for m in await store.messages(chat)] == [
        first,
        "Which flight?",
        "The first one",
    ]
    seqs = [m.seq async for m in Message.objects.filter(conversation_id=chat).order_by("seq")]
    assert seqs == [1, 2, 3]
    title = (await Conversation.objects.aget(pk=chat)).title
    assert title.startswith("Book a flight from JFK to LAX please") and title.endswith("…")
    assert len(title) == 61  # 60 characters and the ellipsis


async def test_a_message_for_a_conversation_that_is_gone_is_refused() -> None:
    with pytest.raises(Conversation.DoesNotExist):
        await DjangoStore().append(str(uuid.uuid4()), "m1", {"role": "user", "content": "hi"})


async def test_one_worker_holds_a_turn_until_it_releases_it_or_its_lease_runs_out() -> None:
    store, chat = DjangoStore(), await new_conversation()
    assert await store.take_turn(chat) and await store.turn_holder(chat) == WORKER_ID
    assert await store.take_turn(chat)  # the holder may take it again
    assert await store.renew_turn(chat)
    await store.release_turn(chat)
    assert await store.turn_holder(chat) == ""

    later = timezone.now() + timedelta(seconds=20)
    await Conversation.objects.filter(pk=chat).aupdate(turn_worker=OTHER, turn_expires=later)
    assert not await store.take_turn(chat)  # another worker's turn runs
    assert not await store.renew_turn(chat)
    assert await store.turn_holder(chat) == OTHER
    await store.release_turn(chat)  # not ours to release
    assert await store.turn_holder(chat) == OTHER
    assert await store.take_turn(chat, replacing=OTHER)  # a takeover names whom it replaces

    past = timezone.now() - timedelta(seconds=1)
    await Conversation.objects.filter(pk=chat).aupdate(turn_worker=OTHER, turn_expires=past)
    assert await store.turn_holder(chat) == ""  # an expired lease holds nothing
    assert await store.take_turn(chat)


async def test_messages_sent_while_a_turn_runs_wait_in_order_on_record() -> None:
    store, chat = DjangoStore(), await new_conversation()
    await store.enqueue(chat, QueuedMessage("q1", "first", "c-1"))
    await store.enqueue(chat, QueuedMessage("q2", "second"))
    assert await store.queued(chat) == [
        QueuedMessage("q1", "first", "c-1"),
        QueuedMessage("q2", "second", None),
    ]
    await store.dequeue(chat, "q1")
    await store.dequeue(chat, "unknown")  # nothing to take: nothing changes
    await store.dequeue(str(uuid.uuid4()), "q2")  # a conversation that is gone: nothing
    assert [m.text for m in await store.queued(chat)] == ["second"]
    rows = QueueEntry.objects.filter(conversation_id=chat).values_list(
        "message_id", "text", "client_id", "owner"
    )
    assert [r async for r in rows] == [("q2", "second", "", "session:store")]


async def test_a_turn_reads_its_history_with_its_lease_and_its_release_records_its_messages() -> (
    None
):
    """The lease comes with the conversation's messages (one transaction); what the turn then
    appends without waiting is in its history at once, and on record, in order, once the
    release (which records the phase done and says whether messages wait) is done. A phase
    queued before the release is not written after it."""
    store, chat = DjangoStore(), await new_conversation()
    await store.append(chat, "m0", {"role": "user", "content": "earlier"})
    assert await store.take_turn(chat)
    await store.append(chat, "m1", {"role": "user", "content": "hi"}, wait=False)
    assert [m["content"] for m in await store.messages(chat)] == ["earlier", "hi"]
    await store.save_phase(chat, "streaming")
    await store.append(chat, "m2", {"role": "assistant", "content": "hello"}, wait=False)
    assert await store.release_turn(chat) is False  # nothing queued
    assert [m.content async for m in Message.objects.filter(conversation_id=chat)] == [
        "earlier",
        "hi",
        "hello",
    ]
    await store.save_phase(chat, "done")
    await flush()
    row = await Conversation.objects.aget(pk=chat)
    assert (row.phase, row.turn_worker, row.turn_expires) == ("done", "", None)
    # Released, the history is read from the record again.
    assert [m["content"] for m in await store.messages(chat)] == ["earlier", "hi", "hello"]

    assert await store.take_turn(chat)
    await store.enqueue(chat, QueuedMessage("q1", "later"))
    assert await store.release_turn(chat) is True


async def test_only_the_latest_phase_of_a_burst_is_written_to_the_chat_and_its_live_calls() -> None:
    store, chat = DjangoStore(), await new_conversation()
    await ToolSession.objects.acreate(id="live", conversation_id=chat, tool_name="t")
    await ToolSession.objects.acreate(
        id="ended", conversation_id=chat, tool_name="t", ended_at=timezone.now()
    )
    for phase in ("thinking", "calling_tool", "awaiting_answer"):
        await store.save_phase(chat, phase)  # type: ignore[arg-type]
    await flush()
    assert (await Conversation.objects.aget(pk=chat)).phase == "awaiting_answer"
    phases = {s.id: s.phase async for s in ToolSession.objects.filter(conversation_id=chat)}
    assert phases == {"live": "awaiting_answer", "ended": ""}


async def test_a_call_of_a_gone_worker_is_claimed_once() -> None:
    chat = await new_conversation()
    await ToolSession.objects.acreate(id="c1", conversation_id=chat, tool_name="t", worker=OTHER)
    store = DjangoStore()
    [call] = await store.resumable(chat)
    assert (call.call_id, call.worker) == ("c1", OTHER)
    assert await store.claim("c1", OTHER)
    assert not await store.claim("c1", OTHER)  # another worker was quicker: it is not ours
    row = await ToolSession.objects.aget(pk="c1")
    assert (row.worker, row.resumes) == (WORKER_ID, 1)


def test_the_owner_is_the_user_or_the_browser_session() -> None:
    class User:
        pk = 7
        is_authenticated = True

    class Anonymous:
        is_authenticated = False

    assert owner_key(User(), "s1") == "user:7"
    assert owner_key(Anonymous(), "s1") == "session:s1"
    assert owner_key(None, None) is None
