"""Caps per visitor in the chat: chats busy at once (a reply being written or a tool waiting
for an answer: what holds memory) and chats started per hour, each refused in words that say
what to do, with a way out."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.test import Client, override_settings
from django.utils import timezone

from chatbridge.chat.models import Conversation, Message
from chatbridge.engine.conversation import CommandRefused
from tests.chat_client import ChatClient, new_browser_session, new_conversation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]

BOOK = "Book a flight from JFK to LAX"
TOO_MANY_RUNNING = (
    "You have 2 chats busy with a reply or a question waiting for your answer, the most you "
    "may have at once. Answer or stop one of them first, then send this again."
)
TOO_MANY_CHATS = (
    "You have started 3 chats in the last hour, the most you may start in an hour. "
    "Continue in one of your chats, or start a new one later."
)


async def visitor_chats(n: int) -> list[ChatClient]:
    key = await new_browser_session()
    chats = [ChatClient(await new_conversation(key), key) for _ in range(n)]
    for chat in chats:
        await chat.connect()
    return chats


@override_settings(CHATBRIDGE_RUNNING_TURNS_PER_VISITOR=2)
async def test_a_visitor_with_too_many_busy_chats_is_refused_and_can_still_answer() -> None:
    first, second, third = await visitor_chats(3)
    someone_else = await ChatClient.start()
    try:
        await first.send_user(BOOK)
        flights = await first.next("elicit", key="pick_flight")
        await second.send_user(BOOK)
        await second.next("elicit", key="pick_flight")

        await third.send_user("hello")
        refused = await third.next("error")
        assert (refused["code"], refused["message"]) == ("TOO_MANY_RUNNING", TOO_MANY_RUNNING)
        assert not [e for e in third.events if e["type"] == "user_message"]  # nothing kept
        await someone_else.send_user(BOOK)  # another visitor is not held back
        await someone_else.next("elicit", key="pick_flight")

        # The way out: the waiting questions can still be answered, and stopped.
        await first.answer(flights, flight_id=flights["context"]["flights"][0]["id"])
        seats = await first.next("elicit", key="pick_seat")
        await first.answer(seats, action="cancel")
        await first.next("conversation_state", phase="done", running=False)
        await third.send_user("hello")
        await third.next("user_message", content="hello")
        await third.next("conversation_state", phase="done", running=False)
    finally:
        for chat in (first, second, third, someone_else):
            await chat.close()


@override_settings(CHATBRIDGE_CONVERSATIONS_PER_HOUR=3)
def test_a_visitor_may_start_only_so_many_chats_an_hour() -> None:
    browser = Client()
    assert browser.get("/").status_code == 302  # the first chat: one
    started = [Conversation.objects.get()]
    for _ in range(2):
        Message.objects.create(id=f"m{len(started)}", conversation=started[-1], seq=1, role="user")
        response = browser.post("/c/new/")
        assert response.status_code == 302
        started.append(Conversation.objects.exclude(pk__in=[c.pk for c in started]).get())
    Message.objects.create(id="m3", conversation=started[-1], seq=1, role="user")

    refused = browser.post("/c/new/")
    assert refused.status_code == 429
    assert TOO_MANY_CHATS in refused.content.decode()
    assert Conversation.objects.count() == 3
    assert Client().get("/").status_code == 302  # another visitor starts theirs
    # An hour later the visitor may start chats again.
    Conversation.objects.filter(pk__in=[c.pk for c in started]).update(
        created_at=timezone.now() - timedelta(hours=1, minutes=1)
    )
    assert browser.post("/c/new/").status_code == 302
    assert Conversation.objects.count() == 5


async def test_the_limits_have_sane_defaults() -> None:
    from chatbridge.conf import setting

    limits = await sync_to_async(
        lambda: [
            setting(name)
            for name in (
                "CHATBRIDGE_QUEUE_PER_CONVERSATION",
                "CHATBRIDGE_QUEUE_PER_VISITOR",
                "CHATBRIDGE_RUNNING_TURNS_PER_VISITOR",
                "CHATBRIDGE_CONVERSATIONS_PER_HOUR",
                "CHATBRIDGE_RETENTION_DAYS",
            )
        ]
    )()
    assert limits == [20, 50, 10, 100, 30]


def test_the_limits_come_from_the_environment_none_turning_one_off() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from chatbridge.environment import env_limit

    assert env_limit({}, "CAP", 20) == 20
    assert env_limit({"CAP": " 5 "}, "CAP", 20) == 5
    assert env_limit({"CAP": "None"}, "CAP", 20) is None
    with pytest.raises(ImproperlyConfigured, match="CAP='-1' must be 0 or more, or none"):
        env_limit({"CAP": "-1"}, "CAP", 20)
    with pytest.raises(ImproperlyConfigured, match="CAP='lots' is not a whole number"):
        env_limit({"CAP": "lots"}, "CAP", 20)


@override_settings(CHATBRIDGE_RUNNING_TURNS_PER_VISITOR=1)
def test_a_chat_busy_on_another_worker_is_busy_not_over_the_cap() -> None:
    """Its message may then be queued ("Send anyway"): the cap is about starting turns."""
    from chatbridge.records import store

    until = timezone.now() + timedelta(seconds=30)
    busy, elsewhere, idle = (Conversation.objects.create(owner="session:w") for _ in range(3))
    Conversation.objects.filter(pk=busy.pk).update(turn_worker="w1:1", turn_expires=until)
    Conversation.objects.filter(pk=elsewhere.pk).update(turn_worker="w2:2", turn_expires=until)
    assert store._take_new_turn(str(elsewhere.pk), "") is False  # BUSY: may be queued
    with pytest.raises(CommandRefused) as refused:
        store._take_new_turn(str(idle.pk), "")
    assert refused.value.code == "TOO_MANY_RUNNING"
    assert Conversation.objects.get(pk=idle.pk).turn_worker == ""  # nothing taken
