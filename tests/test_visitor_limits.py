"""Caps per visitor in the chat: chats busy at once (a reply being written or a tool waiting
for an answer: what holds memory) and chats started per hour, each refused in words that say
what to do, with a way out; and what holds against one client that mints fresh cookies: open
sockets per visitor and per client address, busy chats per address, and a command rate shared
by a visitor's sockets and by an address's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.test import Client, override_settings
from django.utils import timezone

from chatbridge.engine.conversation import CommandRefused
from chatbridge.records.models import Conversation, Message
from tests.chat_client import ChatClient, new_browser_session, new_conversation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]

BOOK = "Book a flight from JFK to LAX"
TOO_MANY_RUNNING = (
    "You have 2 chats busy with a reply or a question waiting for your answer, the most you "
    "may have at once. Answer or stop one of them first, then send this again."
)
SOCKETS_FULL = (
    "You have 2 chat pages open in this browser, the most you may have at once. Close some "
    "of them, then reload this page."
)
NETWORK_SOCKETS_FULL = (
    "3 chat pages are open from your network, the most we allow at once. Close some of them, "
    "then reload this page."
)
NETWORK_BUSY = (
    "2 chats from your network are busy with a reply or a question waiting for an answer, the "
    "most we allow at once. Answer or stop one of them first, then send this again."
)
SLOW_DOWN = "Too many messages; slow down."
# One household's address (its cookies are fresh each time), and another. Each test has an
# address of its own: the process keeps an address's rate until its bucket has filled again.
HOME = ("203.0.113.7", 50000)
ELSEWHERE = ("198.51.100.20", 50000)
APPROVE_NOTHING = {"type": "approve", "call_id": "x"}  # answered NOT_FOUND: one event each
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

    names = (
        "CHATBRIDGE_QUEUE_PER_CONVERSATION",
        "CHATBRIDGE_QUEUE_PER_VISITOR",
        "CHATBRIDGE_QUEUE_PER_ADDRESS",
        "CHATBRIDGE_RUNNING_TURNS_PER_VISITOR",
        "CHATBRIDGE_RUNNING_TURNS_PER_ADDRESS",
        "CHATBRIDGE_CONVERSATIONS_PER_HOUR",
        "CHATBRIDGE_RETENTION_DAYS",
        "CHATBRIDGE_SOCKETS_PER_VISITOR",
        "CHATBRIDGE_SOCKETS_PER_ADDRESS",
        "CHATBRIDGE_WS_RATE",
        "CHATBRIDGE_WS_BURST",
        "CHATBRIDGE_WS_RATE_PER_ADDRESS",
        "CHATBRIDGE_WS_BURST_PER_ADDRESS",
        "CHATBRIDGE_TRUSTED_PROXIES",
    )
    # A household behind one address holds several people, each with a few chats open.
    assert await sync_to_async(lambda: [setting(name) for name in names])() == [
        20, 50, 200, 10, 50, 100, 30, 30, 200, 10.0, 30.0, 50.0, 150.0, []
    ]  # fmt: skip


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


async def connected(chat: ChatClient) -> ChatClient:
    await chat.connect()
    return chat


@override_settings(CHATBRIDGE_SOCKETS_PER_VISITOR=2)
async def test_a_visitor_may_hold_only_so_many_sockets_and_is_told_why() -> None:
    key = await new_browser_session()
    conversation = await new_conversation(key)
    first = await connected(ChatClient(conversation, key))
    second = await connected(ChatClient(conversation, key))
    someone_else = await ChatClient.start()
    try:
        refused, code = await ChatClient(conversation, key).refused()
        assert (refused["code"], refused["message"], code) == (
            "TOO_MANY_SOCKETS",
            SOCKETS_FULL,
            4429,
        )
        await first.close()  # one page closed: another may open
        third = await connected(ChatClient(conversation, key))
        assert (await third.next("conversation_state"))["conversation_id"] == conversation
        await third.close()
    finally:
        for chat in (second, someone_else):
            await chat.close()


@override_settings(CHATBRIDGE_SOCKETS_PER_ADDRESS=3)
async def test_fresh_cookies_from_one_address_share_its_cap_on_sockets() -> None:
    flood = [await ChatClient.start(client=HOME) for _ in range(3)]
    try:
        key = await new_browser_session()
        refused, code = await ChatClient(await new_conversation(key), key, client=HOME).refused()
        assert (refused["code"], refused["message"], code) == (
            "TOO_MANY_SOCKETS",
            NETWORK_SOCKETS_FULL,
            4429,
        )
        elsewhere = await ChatClient.start(client=ELSEWHERE)  # another address is not held back
        await elsewhere.close()
        await flood.pop().close()
        flood.append(await ChatClient.start(client=HOME))
    finally:
        for chat in flood:
            await chat.close()


@override_settings(CHATBRIDGE_RUNNING_TURNS_PER_ADDRESS=2)
async def test_fresh_cookies_from_one_address_share_its_cap_on_busy_chats() -> None:
    home, away = ("203.0.113.9", 50000), ("198.51.100.22", 50000)
    first, second, third = [await ChatClient.start(client=home) for _ in range(3)]
    elsewhere = await ChatClient.start(client=away)
    try:
        await first.send_user(BOOK)
        flights = await first.next("elicit", key="pick_flight")
        await second.send_user(BOOK)
        await second.next("elicit", key="pick_flight")

        await third.send_user("hello")
        refused = await third.next("error")
        assert (refused["code"], refused["message"]) == ("TOO_MANY_RUNNING", NETWORK_BUSY)
        assert not [e for e in third.events if e["type"] == "user_message"]  # nothing kept
        await elsewhere.send_user(BOOK)
        await elsewhere.next("elicit", key="pick_flight")

        await first.answer(flights, action="cancel")  # the way out: answer or stop one
        await first.next("conversation_state", phase="done", running=False)
        await third.send_user("hello")
        await third.next("user_message", content="hello")
        await third.next("conversation_state", phase="done", running=False)
    finally:
        for chat in (first, second, third, elsewhere):
            await chat.close()


@override_settings(CHATBRIDGE_WS_RATE=0.01, CHATBRIDGE_WS_BURST=4)
async def test_a_visitors_sockets_share_one_command_rate() -> None:
    key = await new_browser_session()
    conversation = await new_conversation(key)
    first = await connected(ChatClient(conversation, key))
    second = await connected(ChatClient(conversation, key))
    someone_else = await ChatClient.start()
    try:
        for chat in (first, first, second, second):
            await chat.send(APPROVE_NOTHING)
            assert (await chat.next("error"))["code"] == "NOT_FOUND"
        await second.send(APPROVE_NOTHING)
        limited = await second.next("error")
        assert (limited["code"], limited["message"]) == ("RATE_LIMITED", SLOW_DOWN)
        await someone_else.send(APPROVE_NOTHING)  # another visitor has a rate of their own
        assert (await someone_else.next("error"))["code"] == "NOT_FOUND"
    finally:
        for chat in (first, second, someone_else):
            await chat.close()


@override_settings(CHATBRIDGE_WS_RATE_PER_ADDRESS=0.01, CHATBRIDGE_WS_BURST_PER_ADDRESS=3)
async def test_fresh_cookies_from_one_address_share_its_command_rate() -> None:
    home, away = ("203.0.113.8", 50000), ("198.51.100.21", 50000)
    chats = [await ChatClient.start(client=home) for _ in range(4)]
    elsewhere = await ChatClient.start(client=away)
    try:
        for chat in chats[:3]:
            await chat.send(APPROVE_NOTHING)
            assert (await chat.next("error"))["code"] == "NOT_FOUND"
        await chats[3].send(APPROVE_NOTHING)
        limited = await chats[3].next("error")
        assert (limited["code"], limited["message"]) == ("RATE_LIMITED", SLOW_DOWN)
        await elsewhere.send(APPROVE_NOTHING)
        assert (await elsewhere.next("error"))["code"] == "NOT_FOUND"
    finally:
        for chat in (*chats, elsewhere):
            await chat.close()


@override_settings(CHATBRIDGE_SOCKETS_PER_ADDRESS=1, CHATBRIDGE_TRUSTED_PROXIES=["10.0.0.5"])
async def test_behind_a_trusted_balancer_each_client_address_counts_on_its_own() -> None:
    balancer = ("10.0.0.5", 41000)

    def forwarded(address: str) -> tuple[tuple[bytes, bytes], ...]:
        return ((b"x-forwarded-for", address.encode()),)

    one = await ChatClient.start(client=balancer, headers=forwarded("203.0.113.1"))
    two = await ChatClient.start(client=balancer, headers=forwarded("203.0.113.2"))
    # A client that reaches the worker itself and names an address is counted as itself.
    direct = await ChatClient.start(client=("198.51.100.9", 5000), headers=forwarded("192.0.2.1"))
    try:
        key = await new_browser_session()
        again = ChatClient(
            await new_conversation(key), key, client=balancer, headers=forwarded("203.0.113.1")
        )
        refused, _ = await again.refused()
        assert refused["code"] == "TOO_MANY_SOCKETS"
        key = await new_browser_session()
        forged = ChatClient(
            await new_conversation(key),
            key,
            client=("198.51.100.9", 5001),
            headers=forwarded("192.0.2.2"),
        )
        refused, _ = await forged.refused()
        assert refused["code"] == "TOO_MANY_SOCKETS"
    finally:
        for chat in (one, two, direct):
            await chat.close()


@override_settings(CHATBRIDGE_SOCKETS_PER_VISITOR=1, CHATBRIDGE_RUNNING_TURNS_PER_ADDRESS=1)
async def test_the_refusals_are_in_the_pages_language() -> None:
    french = ((b"accept-language", b"fr"),)
    home = ("203.0.113.10", 50000)
    first = await ChatClient.start(client=home, headers=french)
    second = await ChatClient.start(client=home, headers=french)
    try:
        refused, _ = await ChatClient(first.conversation_id, first.session_key).refused()
        assert refused["message"] == (  # this socket asked for no language: English
            "You have 1 chat page open in this browser, the most you may have at once. Close "
            "it, then reload this page."
        )
        again = ChatClient(first.conversation_id, first.session_key, headers=french)
        refused, _ = await again.refused()
        assert refused["message"] == (
            "Vous avez 1 page de discussion ouverte dans ce navigateur, le maximum que vous "
            "pouvez avoir à la fois. Fermez-la, puis rechargez cette page."
        )
        await first.send_user(BOOK)
        await first.next("elicit", key="pick_flight")
        await second.send_user("bonjour")  # counted on the database's thread, said in French
        busy = await second.next("error")
        assert (busy["code"], busy["message"]) == (
            "TOO_MANY_RUNNING",
            "1 discussion de votre réseau est occupée par une réponse ou par une question qui "
            "attend une réponse, le maximum que nous autorisons à la fois. Répondez-y ou "
            "arrêtez-la d'abord, puis renvoyez ce message.",
        )
    finally:
        for chat in (first, second):
            await chat.close()
