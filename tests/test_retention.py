"""Retention of finished calls: ended tool sessions older than CHATBRIDGE_RETENTION_DAYS go,
with their journals (the answers), links and log lines, by a management command and by the
runtime once an hour; a live or suspended call is never deleted, however old."""

from __future__ import annotations

import asyncio
import io
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings
from django.utils import timezone

from chatbridge.records import retention
from chatbridge.records.models import Conversation, ElicitLink, JournalRecord, Message, ToolSession
from chatbridge.runtime import ChatBridgeRuntime

pytestmark = pytest.mark.django_db(transaction=True)


def call(
    conversation: Conversation, call_id: str, status: str, ended_days_ago: float | None
) -> None:
    now = timezone.now()
    ended = None if ended_days_ago is None else now - timedelta(days=ended_days_ago)
    ToolSession.objects.create(
        id=call_id,
        conversation=conversation,
        tool_name="book_flight",
        status=status,
        ended_at=ended,
        logs=[{"level": "info", "message": "Searching flights", "data": {}}],
    )
    ToolSession.objects.filter(pk=call_id).update(created_at=(ended or now) - timedelta(hours=1))
    JournalRecord.objects.create(
        session_id=call_id,
        seq=1,
        pos=0,
        kind="elicit",
        key="pick_flight",
        elicit_id=f"book_flight:pick_flight:{call_id}:1",
        request={"message": "Select your flight"},
        result={"action": "accept", "content": {"flight_id": "SH-1"}},
        requested_at=now,
    )
    ElicitLink.objects.create(
        elicit_id=f"book_flight:payment:{call_id}:2",
        call_id=call_id,
        tool_name="book_flight",
        key="payment",
        token_hash=call_id.ljust(64, "0"),
        nonce="n",
        expires_at=now,
    )


def seed() -> Conversation:
    """Calls of every kind, old and recent, in one chat whose messages name them."""
    chat = Conversation.objects.create(owner="session:r", title="Old trips")
    for n, call_id in enumerate(
        ["old_done", "old_failed", "old_aborted", "old_waiting", "new_done"]
    ):
        Message.objects.create(
            id=f"m{n}",
            conversation=chat,
            seq=n + 1,
            role="assistant",
            tool_calls=[
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "book_flight", "arguments": "{}"},
                }
            ],
        )
    call(chat, "old_done", "completed", 40)
    call(chat, "old_failed", "failed", 31)
    call(chat, "old_aborted", "aborted", 400)
    call(chat, "old_waiting", "awaiting_elicit", None)  # suspended for months: kept
    ToolSession.objects.filter(pk="old_waiting").update(
        created_at=timezone.now() - timedelta(days=90)
    )
    call(chat, "old_running", "running", None)
    call(chat, "new_done", "completed", 29)
    return chat


def left() -> dict[str, Any]:
    return {
        "sessions": sorted(ToolSession.objects.values_list("id", flat=True)),
        "journal": sorted(JournalRecord.objects.values_list("session_id", flat=True)),
        "links": sorted(ElicitLink.objects.values_list("call_id", flat=True)),
    }


KEPT = ["new_done", "old_running", "old_waiting"]


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("chatbridge_sessions", *args, stdout=out)
    return out.getvalue()


def test_purge_deletes_ended_calls_past_retention_and_never_a_live_one() -> None:
    chat = seed()
    orphan = {"call_id": "pruned_long_ago", "tool_name": "book_flight", "key": "payment"}
    ElicitLink.objects.create(  # its call was deleted by `prune`, which left the link
        elicit_id="book_flight:payment:pruned_long_ago:1",
        token_hash="p" * 64,
        nonce="n",
        expires_at=timezone.now() - timedelta(days=31),
        **orphan,
    )
    assert run("purge", "--dry-run") == (
        "3 ended call(s) ended before the retention of 30 day(s); nothing deleted (--dry-run).\n"
    )
    assert len(left()["sessions"]) == 6
    assert run("purge") == (
        "Deleted 3 ended call(s) that ended more than 30 day(s) ago, with their journals, "
        "links and log lines.\n"
    )
    assert left() == {"sessions": KEPT, "journal": KEPT, "links": KEPT}
    assert Message.objects.filter(conversation=chat).count() == 5  # the chat itself stays
    browser = Client()
    browser.get("/")  # a session
    Conversation.objects.filter(pk=chat.pk).update(owner=f"session:{browser.session.session_key}")
    page = browser.get(f"/c/{chat.pk}/")
    assert page.status_code == 200  # its page still shows, with the calls it no longer has


def test_purge_takes_days_batches_and_a_retention_of_none_keeps_everything() -> None:
    seed()
    with override_settings(CHATBRIDGE_RETENTION_DAYS=None):
        assert run("purge") == (
            "CHATBRIDGE_RETENTION_DAYS is None: ended calls are kept. Pass --days N to "
            "delete those that ended more than N days ago.\n"
        )
        assert retention.purge() == 0
    assert len(left()["sessions"]) == 6
    assert retention.purge(days=35, batch=1) == 2  # in batches of one
    assert run("purge", "--days", "10") == (
        "Deleted 2 ended call(s) that ended more than 10 day(s) ago, with their journals, "
        "links and log lines.\n"
    )
    assert left()["sessions"] == ["old_running", "old_waiting"]
    with pytest.raises(CommandError, match="--days must be a positive number of days"):
        run("purge", "--days", "-1")


async def test_the_runtime_purges_once_an_hour_in_the_background(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await sync_to_async(seed)()
    monkeypatch.setattr(retention, "last_purge", None)  # no purge yet in this process
    runtime = ChatBridgeRuntime.from_settings()
    runtime.retention.delay = 0  # a server purges a minute after it starts
    async with runtime:
        await asyncio.wait_for(runtime.retention.passed.wait(), 10)
        assert (await sync_to_async(left)())["sessions"] == KEPT
        await sync_to_async(seed_more)()
    # A second runtime within the hour does not purge again: the process did already.
    again = ChatBridgeRuntime.from_settings()
    again.retention.delay = 0
    async with again:
        await asyncio.wait_for(again.retention.passed.wait(), 10)
        assert again.retention.deleted == 0
    assert "older" in (await sync_to_async(left)())["sessions"]


def seed_more() -> None:
    call(Conversation.objects.get(), "older", "completed", 100)
