"""A conversation forks over a real Channels stack: a message edited and sent again, the last
reply regenerated. What followed the fork point is kept (abandoned by that fork, readable),
never read by the model again; nothing that committed (a paid booking) is gone back past."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chatbridge.records.models import Conversation, Message
from chatbridge.records.store import _messages
from tests.chat_client import ChatClient
from tests.test_chat_socket import to_seat_picker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]


@pytest.fixture
async def chat() -> AsyncIterator[ChatClient]:
    client = await ChatClient.start()
    yield client
    await client.close()


@sync_to_async
def title_of(conversation_id: str) -> str:
    return Conversation.objects.get(id=conversation_id).title


@sync_to_async
def rows(conversation_id: str) -> list[tuple[str, str, str, int]]:
    """The conversation's messages on record: id, role, content, abandoned by fork n."""
    found = Message.objects.filter(conversation_id=conversation_id).order_by("seq")
    return list(found.values_list("id", "role", "content", "abandoned"))


async def exchange(chat: ChatClient, text: str) -> tuple[str, dict[str, Any]]:
    """Send ``text``; its message id and the final reply."""
    await chat.send_user(text)
    sent = await chat.next("user_message", content=text)
    reply = await chat.next("assistant_message")
    await chat.turn_done()
    return sent["message_id"], reply


async def test_an_edited_message_forks_the_conversation(chat: ChatClient) -> None:
    first, reply = await exchange(chat, "Hello there")
    await chat.send({"type": "edit_message", "message_id": first, "text": "What can you do?"})
    forked = await chat.next("conversation_forked")
    assert forked["messages"] == [first, reply["message_id"]] and forked["calls"] == []
    edited = await chat.next("user_message", content="What can you do?")
    assert edited["message_id"] != first
    await chat.next("assistant_message")
    await chat.turn_done()

    on_record = await rows(chat.conversation_id)
    assert [(role, abandoned) for _id, role, _text, abandoned in on_record] == [
        ("user", 1),
        ("assistant", 1),
        ("user", 0),
        ("assistant", 0),
    ]
    assert on_record[0][2] == "Hello there"  # the earlier version, kept as it was
    # The chat is named after its first message, on the page and on record alike.
    assert edited["title"] == "What can you do?"
    assert await title_of(chat.conversation_id) == "What can you do?"
    # What the model reads now: the new branch only.
    read = await sync_to_async(_messages)(chat.conversation_id)
    assert [(m["role"], m["content"]) for m in read][0] == ("user", "What can you do?")
    assert len(read) == 2


async def test_the_last_reply_is_regenerated_and_the_earlier_one_kept(chat: ChatClient) -> None:
    await exchange(chat, "Hello there")
    _second, reply = await exchange(chat, "Tell me more")
    await chat.send({"type": "regenerate", "message_id": reply["message_id"]})
    forked = await chat.next("conversation_forked")
    assert forked["messages"] == [reply["message_id"]]
    again = await chat.next("assistant_message")
    assert again["message_id"] != reply["message_id"]
    await chat.turn_done()
    on_record = await rows(chat.conversation_id)
    assert [abandoned for *_rest, abandoned in on_record] == [0, 0, 0, 1, 0]
    assert [role for _id, role, _t, n in on_record if not n] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]

    # Only the last reply may be regenerated; only one's own messages edited.
    earlier_reply = on_record[1][0]
    await chat.send({"type": "regenerate", "message_id": earlier_reply})
    refused = await chat.next("error")
    assert (refused["code"], refused["message"]) == (
        "BAD_COMMAND",
        "Only the last reply can be regenerated.",
    )
    await chat.send({"type": "edit_message", "message_id": earlier_reply, "text": "x"})
    assert (await chat.next("error"))["message"] == "Only your own messages can be edited."
    await chat.send({"type": "edit_message", "message_id": "nope", "text": "x"})
    assert (await chat.next("error"))["code"] == "NOT_FOUND"
    assert await rows(chat.conversation_id) == on_record  # nothing changed


async def test_a_message_before_a_paid_booking_cannot_be_edited(chat: ChatClient) -> None:
    flights, seats = await to_seat_picker(chat)
    seat_map = seats["context"]["seat_map"]
    free = next(
        f"{row}{seat}"
        for row in range(1, seat_map["rows"] + 1)
        for seat in seat_map["seats"]
        if f"{row}{seat}" not in seat_map["taken"]
    )
    await chat.answer(seats, seat_label=free)
    await chat.review_and_pay()
    await chat.next("tool_call", status="completed", timeout=20)
    await chat.turn_done(timeout=20)
    [first] = [e["message_id"] for e in chat.events if e["type"] == "user_message"]
    before = await rows(chat.conversation_id)

    await chat.send({"type": "edit_message", "message_id": first, "text": "Book to SFO"})
    refused = await chat.next("error")
    assert refused["code"] == "CHANGE_REFUSED"
    assert "book flight committed after it" in refused["message"]
    assert await rows(chat.conversation_id) == before
    # The conversation still takes new messages (the refusal released its turn).
    await exchange(chat, "Thanks")
