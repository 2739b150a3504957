"""Conversation persistence for the engine, who owns a conversation, who runs its turn."""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from chatbridge.chat import lean_sql
from chatbridge.chat.models import (
    ACTIVE_STATUSES,
    Conversation,
    Message,
    QueueEntry,
    ToolSession,
    WorkerHeartbeat,
    as_llm_message,
)
from chatbridge.chat.outage import db_call
from chatbridge.chat.recorder import WORKER_ID
from chatbridge.chat.writer import undo_on_retry, write_later, write_now
from chatbridge.conf import setting
from chatbridge.core.commitment import abort_requested
from chatbridge.core.conversation import CommandRefused, ResumableCall, too_many_running
from chatbridge.core.protocol import Phase
from chatbridge.core.turns import QueuedMessage, queue_full

__all__ = [
    "HEARTBEAT_SECONDS",
    "HEARTBEAT_TTL",
    "LEASE_SECONDS",
    "DjangoStore",
    "beat",
    "forget_worker",
    "owner_key",
    "worker_alive",
]

TITLE_LENGTH = 60
LEASE_SECONDS = 20.0  # a turn's lease, renewed every few seconds while it runs
HEARTBEAT_SECONDS = 2.0  # how often a worker says it is alive
HEARTBEAT_TTL = 10.0  # silent this long: the worker is gone and its calls may be taken over


def owner_key(user: Any, session_key: str | None) -> str | None:
    """``user:<id>`` for a logged-in user, ``session:<key>`` for a browser session."""
    if user is not None and getattr(user, "is_authenticated", False):
        return f"user:{user.pk}"
    return f"session:{session_key}" if session_key else None


def _append(conversation_id: str, message_id: str, message: dict[str, Any]) -> None:
    with transaction.atomic():  # the conversation's row locked: one writer of its next seq
        if lean_sql.select(Conversation, ("id",), for_update=True, id=conversation_id) is None:
            raise Conversation.DoesNotExist(f"no conversation {conversation_id}")
        if lean_sql.select(Message, ("id",), id=message_id) is not None:
            return  # written by a run whose commit was cut off (the database went away)
        last = lean_sql.max_of(Message, "seq", conversation_id=conversation_id) or 0
        now = timezone.now()
        lean_sql.insert(
            Message,
            {
                "id": message_id,
                "conversation_id": conversation_id,
                "seq": last + 1,
                "role": message["role"],
                "content": message.get("content") or "",
                "tool_calls": message.get("tool_calls"),
                "tool_call_id": message.get("tool_call_id") or "",
                "stopped": bool(message.get("stopped")),  # not part of what the model reads
                "created_at": now,
            },
        )
        changed: dict[str, Any] = {"updated_at": now}
        if message["role"] == "user" and last == 0:
            text = " ".join(str(message.get("content") or "").split())
            changed["title"] = text[:TITLE_LENGTH] + ("…" if len(text) > TITLE_LENGTH else "")
        lean_sql.update(Conversation, changed, id=conversation_id)


def _messages(conversation_id: str) -> list[dict[str, Any]]:
    columns = ("role", "content", "tool_calls", "tool_call_id")
    return [
        as_llm_message(*row)
        for row in lean_sql.rows(Message, columns, "seq", conversation_id=conversation_id)
    ]


# A turn passes through several phases in a few milliseconds; only the latest one needs
# writing, and queued phase writes would delay the journal writes that wait behind them.
# The event loop sets it and the writer thread takes it: every access holds the lock.
_latest_phase: dict[str, str] = {}
_latest_phase_lock = threading.Lock()


def _note_phase(conversation_id: str, phase: str) -> bool:
    """Record the latest phase; True if a write must be queued (none is queued yet)."""
    with _latest_phase_lock:
        queued = conversation_id in _latest_phase
        _latest_phase[conversation_id] = phase
    return not queued


def _save_latest_phase(conversation_id: str) -> None:
    with _latest_phase_lock:
        phase = _latest_phase.pop(conversation_id, None)
    if phase is None:
        return
    undo_on_retry(lambda: _phase_back(conversation_id, phase))
    lean_sql.update(Conversation, {"phase": phase}, id=conversation_id)
    lean_sql.update(ToolSession, {"phase": phase}, conversation_id=conversation_id, ended_at=None)


def _phase_back(conversation_id: str, phase: str) -> None:
    """The write runs again (the database went away): it finds its phase, or a newer one."""
    with _latest_phase_lock:
        _latest_phase.setdefault(conversation_id, phase)


def _resumable(conversation_id: str) -> list[ResumableCall]:
    return [
        ResumableCall(
            s.id,
            s.tool_name,
            dict(s.arguments),
            s.journal_entries(),
            s.worker,
            abort_requested(s.commitment),
        )
        for s in ToolSession.objects.filter(
            conversation_id=conversation_id, status__in=ACTIVE_STATUSES
        ).order_by("created_at")
    ]


def _claim(call_id: str, worker: str) -> bool:
    taken = ToolSession.objects.filter(
        pk=call_id, worker=worker, status__in=ACTIVE_STATUSES
    ).update(worker=WORKER_ID, resumes=F("resumes") + 1, last_resumed_at=timezone.now())
    return taken == 1


def _take_turn(conversation_id: str, replacing: str) -> bool:
    now = timezone.now()
    free = (
        Q(turn_worker="")
        | Q(turn_worker=WORKER_ID)
        | Q(turn_expires__isnull=True)
        | Q(turn_expires__lt=now)
    )
    if replacing:
        free |= Q(turn_worker=replacing)
    taken = (
        Conversation.objects.filter(pk=conversation_id)
        .filter(free)
        .update(turn_worker=WORKER_ID, turn_expires=now + timedelta(seconds=LEASE_SECONDS))
    )
    return taken == 1


# PostgreSQL: a capped turn start holds this advisory lock (with the owner's hash) to its
# commit, so workers starting a visitor's turns at once count them one after the other.
_TURN_LOCK = 4252


def _take_new_turn(conversation_id: str, replacing: str) -> bool:
    cap = setting("CHATBRIDGE_RUNNING_TURNS_PER_VISITOR")
    if cap is None:
        return _take_turn(conversation_id, replacing)
    with transaction.atomic():
        found = lean_sql.select(Conversation, ("owner",), id=conversation_id)
        if found is None:
            return False
        _lock_owner(_TURN_LOCK, found[0])
        # The lease first: a chat whose turn runs elsewhere is BUSY (its message may be
        # queued), not over the cap. Over the cap, the refusal rolls the lease back.
        if not _take_turn(conversation_id, replacing):
            return False
        busy = (
            Conversation.objects.filter(owner=found[0], turn_expires__gte=timezone.now())
            .exclude(turn_worker="")
            .exclude(pk=conversation_id)
        )
        if _at_least(busy, cap):
            raise too_many_running(cap)
        return True


def _lock_owner(kind: int, owner: str) -> None:
    """On PostgreSQL, take the transaction's advisory lock ``kind`` for ``owner``: counts
    and the write they allow happen one worker at a time. Elsewhere nothing (SQLite has one
    writer at a time)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [kind, owner])


def _renew_turn(conversation_id: str) -> bool:
    expires = timezone.now() + timedelta(seconds=LEASE_SECONDS)
    renewed = Conversation.objects.filter(pk=conversation_id, turn_worker=WORKER_ID).update(
        turn_expires=expires
    )
    return renewed == 1


def _release_turn(conversation_id: str) -> None:
    Conversation.objects.filter(pk=conversation_id, turn_worker=WORKER_ID).update(
        turn_worker="", turn_expires=None
    )


def _turn_holder(conversation_id: str) -> str:
    row = (
        Conversation.objects.filter(pk=conversation_id, turn_expires__gte=timezone.now())
        .values_list("turn_worker", flat=True)
        .first()
    )
    return row or ""


def beat() -> None:
    """Say this worker is alive (a row per worker, its time pushed on)."""
    WorkerHeartbeat.objects.update_or_create(worker=WORKER_ID, defaults={"beat_at": timezone.now()})


def forget_worker() -> None:
    """This worker stops (a clean shutdown): its calls may be taken over at once."""
    WorkerHeartbeat.objects.filter(worker=WORKER_ID).delete()


def _process_gone(worker: str) -> bool:
    """``worker`` (``host:pid``) ran on this host and its process no longer exists."""
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by someone else
        return False
    return False


def worker_alive(worker: str) -> bool:
    """Is ``worker`` alive? Its heartbeat is recent (and, on this host, its process exists).

    Liveness comes from the database, never from the channel layer: a worker whose Redis is
    down keeps its calls.
    """
    if not worker or _process_gone(worker):
        return False
    since = timezone.now() - timedelta(seconds=HEARTBEAT_TTL)
    return WorkerHeartbeat.objects.filter(worker=worker, beat_at__gte=since).exists()


def _queued(conversation_id: str) -> list[QueuedMessage]:
    columns = ("message_id", "text", "client_id")
    return [
        QueuedMessage(message_id, text, client_id or None)
        for message_id, text, client_id in lean_sql.rows(
            QueueEntry, columns, "id", conversation_id=conversation_id
        )
    ]


def _at_least(rows: QuerySet[Any], limit: int) -> bool:
    """Whether ``rows`` holds ``limit`` rows or more, reading at most ``limit`` of them."""
    return limit <= 0 or rows[limit - 1 : limit].exists()


# PostgreSQL: an enqueue holds this advisory lock (with the owner's hash) to its commit, so
# the workers' counts of one visitor's queue cannot race past the cap.
_QUEUE_LOCK = 4251


def _owner(conversation_id: str) -> str:
    found = lean_sql.select(Conversation, ("owner",), id=conversation_id)
    if found is None:
        raise Conversation.DoesNotExist(f"no conversation {conversation_id}")
    return str(found[0])


def _queue_refusal(conversation_id: str, owner: str) -> CommandRefused | None:
    """Why a message may not join the conversation's queue now (None: it may). Two reads of
    at most a cap's worth of index entries each."""
    per_chat = setting("CHATBRIDGE_QUEUE_PER_CONVERSATION")
    per_visitor = setting("CHATBRIDGE_QUEUE_PER_VISITOR")
    here = QueueEntry.objects.filter(conversation_id=conversation_id)
    if per_chat is not None and _at_least(here, per_chat):
        return queue_full(per_chat)
    if per_visitor is not None and _at_least(QueueEntry.objects.filter(owner=owner), per_visitor):
        return queue_full(per_visitor, visitor=True)
    return None


def _queue_full(conversation_id: str) -> CommandRefused | None:
    """The refusal, read without a transaction or the writer: a flood past the caps costs
    reads, and the writes of everyone else do not wait behind it."""
    return _queue_refusal(conversation_id, _owner(conversation_id))


def _enqueue(conversation_id: str, message: QueuedMessage) -> None:
    """One INSERT, after the caps are counted again under the visitor's lock."""
    with transaction.atomic():
        if QueueEntry.objects.filter(message_id=message.id).exists():
            return  # queued by a run whose commit was cut off (the database went away)
        owner = _owner(conversation_id)
        _lock_owner(_QUEUE_LOCK, owner)
        if (refused := _queue_refusal(conversation_id, owner)) is not None:
            raise refused
        lean_sql.insert(
            QueueEntry,
            {
                "conversation_id": conversation_id,
                "owner": owner,
                "message_id": message.id,
                "text": message.text,
                "client_id": message.client_id or "",
                "created_at": timezone.now(),
            },
        )


def _dequeue(conversation_id: str, message_id: str) -> None:
    QueueEntry.objects.filter(conversation_id=conversation_id, message_id=message_id).delete()


FULL_MEMO = 1.0  # seconds a full queue's refusal is repeated without asking the database


class DjangoStore:
    """``ConversationStore`` on the Django ORM."""

    def __init__(self) -> None:
        # Conversation id → (until when, refusal): a visitor flooding a full queue is refused
        # from memory. A dequeue here forgets them all (the visitor's other chats may have
        # room again); one on another worker shows within FULL_MEMO.
        self._full: dict[str, tuple[float, CommandRefused]] = {}

    async def messages(self, conversation_id: str) -> list[dict[str, Any]]:
        return await db_call(_messages, conversation_id)

    async def append(self, conversation_id: str, message_id: str, message: dict[str, Any]) -> None:
        await write_now(_append, conversation_id, message_id, message)

    async def save_phase(self, conversation_id: str, phase: Phase) -> None:
        if _note_phase(conversation_id, phase):  # for the admin; off the hot path, coalesced
            write_later(_save_latest_phase, conversation_id)

    async def resumable(self, conversation_id: str) -> list[ResumableCall]:
        return await db_call(_resumable, conversation_id)

    async def claim(self, call_id: str, worker: str) -> bool:
        return await db_call(_claim, call_id, worker)

    # -- MessageQueue: messages waiting for the running turn, durable -----------------------

    async def queued(self, conversation_id: str) -> list[QueuedMessage]:
        return await db_call(_queued, conversation_id)

    async def enqueue(self, conversation_id: str, message: QueuedMessage) -> None:
        now = time.monotonic()
        memo = self._full.get(conversation_id)
        if memo is not None and memo[0] > now:
            raise memo[1]
        try:
            refused = await sync_to_async(_queue_full)(conversation_id)
            if refused is None:
                await write_now(_enqueue, conversation_id, message)
        except CommandRefused as lost_race:  # counted again under the lock: full after all
            refused = lost_race
        if refused is not None:
            if len(self._full) > 1000:  # forget the expired ones
                self._full = {k: v for k, v in self._full.items() if v[0] > now}
            self._full[conversation_id] = (now + FULL_MEMO, refused)
            raise refused

    async def dequeue(self, conversation_id: str, message_id: str) -> None:
        self._full.clear()
        await write_now(_dequeue, conversation_id, message_id)

    # -- TurnLeases: one running turn per conversation across workers ----------------------

    async def take_turn(self, conversation_id: str, replacing: str = "") -> bool:
        return await db_call(_take_turn, conversation_id, replacing)

    # -- VisitorLimits: caps per visitor, counted across workers -----------------------------

    async def take_new_turn(self, conversation_id: str, replacing: str = "") -> bool:
        return await sync_to_async(_take_new_turn)(conversation_id, replacing)

    async def renew_turn(self, conversation_id: str) -> bool:
        return await db_call(_renew_turn, conversation_id)

    async def release_turn(self, conversation_id: str) -> None:
        await db_call(_release_turn, conversation_id)

    async def turn_holder(self, conversation_id: str) -> str:
        return await db_call(_turn_holder, conversation_id)
