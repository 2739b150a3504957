"""Conversation persistence for the engine (``DjangoStore``): messages in order, the latest
phase, the calls a conversation may resume, who owns a conversation.

``DjangoStore`` is also the engine's ``TurnLeases`` (``turn_leases``), ``MessageQueue``
(``message_queue``) and ``VisitorLimits``; which workers are alive is
``chatbridge.records.liveness``'s.
"""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from chatbridge.calls.commitment import abort_requested
from chatbridge.engine.conversation import (
    CommandRefused,
    OnRecord,
    ResumableCall,
    as_llm_message,
    read_back,
    title_of,
)
from chatbridge.engine.protocol import Phase
from chatbridge.engine.turns import QueuedMessage
from chatbridge.records import lean_sql, lease, message_queue, turn_leases
from chatbridge.records.forks import Fork, fork_messages
from chatbridge.records.liveness import (
    HEARTBEAT_SECONDS,
    HEARTBEAT_TTL,
    beat,
    forget_worker,
    worker_alive,
)
from chatbridge.records.models import (
    ACTIVE_STATUSES,
    Conversation,
    Message,
    QueueEntry,
    ToolSession,
)
from chatbridge.records.outage import db_call
from chatbridge.records.turn_leases import LEASE_SECONDS
from chatbridge.records.writer import Latest, write_later, write_now, write_soon

__all__ = [
    "HEARTBEAT_SECONDS",
    "HEARTBEAT_TTL",
    "LEASE_SECONDS",
    "DjangoStore",
    "append_message",
    "beat",
    "forget_worker",
    "on_record",
    "owner_key",
    "worker_alive",
]

# Tests drive these directly under the names they had here.
_enqueue = message_queue.enqueue
_take_new_turn = turn_leases.take_new_turn


def owner_key(user: Any, session_key: str | None) -> str | None:
    """``user:<id>`` for a logged-in user, ``session:<key>`` for a browser session."""
    if user is not None and getattr(user, "is_authenticated", False):
        return f"user:{user.pk}"
    return f"session:{session_key}" if session_key else None


def append_message(conversation_id: str, message_id: str, message: dict[str, Any]) -> None:
    """Append ``message`` to the conversation, in a transaction: the writer's own (it gives
    every write that must fail alone a transaction or savepoint), else one of its own."""
    if transaction.get_connection().in_atomic_block:
        _append_message(conversation_id, message_id, message)
    else:
        with transaction.atomic():
            _append_message(conversation_id, message_id, message)


def _append_message(conversation_id: str, message_id: str, message: dict[str, Any]) -> None:
    """The message appended, numbered after the conversation's last. The conversation's row is
    updated first: it must exist, and the update locks it till commit (one writer of its
    numbers). A message already there (written by a run whose commit was cut off: the database
    went away) is not written twice. Two statements; a user's message reads the last number
    first, to title the conversation after its first message."""
    now = timezone.now()
    changed: dict[str, Any] = {"updated_at": now}
    if not lean_sql.update(Conversation, changed, id=conversation_id):
        raise Conversation.DoesNotExist(f"no conversation {conversation_id}")
    row = {
        "id": message_id,
        "conversation_id": conversation_id,
        "role": message["role"],
        "content": message.get("content") or "",
        "tool_calls": message.get("tool_calls"),
        "tool_call_id": message.get("tool_call_id") or "",
        "stopped": bool(message.get("stopped")),  # not part of what the model reads
        "outcome": message.get("outcome"),  # nor this: a tool message's call as it ended
        "created_at": now,
    }
    first = message["role"] == "user" and not lean_sql.max_of(  # the first the model reads
        Message, "seq", conversation_id=conversation_id, abandoned=0
    )
    written = lean_sql.append_numbered(Message, row, "seq", "conversation_id", "id")
    if first and written:
        title = title_of(str(message.get("content") or ""))
        lean_sql.update(Conversation, {"title": title}, id=conversation_id)


def _take_and_read(
    conversation_id: str, replacing: str, new: bool, address: str = ""
) -> list[dict[str, Any]] | None:
    """Take the conversation's turn lease (``take_new_turn`` for a ``new`` message's turn, sent
    from ``address``) and, if it is taken, read its messages: the turn's history, with the
    lease, in one transaction."""
    if new:
        taken = turn_leases.take_new_turn(conversation_id, replacing, address=address)
    else:
        taken = turn_leases.take_turn(conversation_id, replacing)
    return _messages(conversation_id) if taken else None


def _messages(conversation_id: str) -> list[dict[str, Any]]:
    columns = ("role", "content", "tool_calls", "tool_call_id")
    return [
        as_llm_message(*row)
        for row in lean_sql.rows(
            Message, columns, "seq", conversation_id=conversation_id, abandoned=0
        )
    ]


def _fork(conversation_id: str, message_id: str, edit: bool) -> tuple[Fork, list[dict[str, Any]]]:
    """The fork (``fork_messages``), and the messages the model reads after it."""
    return fork_messages(conversation_id, message_id, edit), _messages(conversation_id)


def _save_phase(conversation_id: str, phase: str) -> None:
    lean_sql.update(Conversation, {"phase": phase}, id=conversation_id)
    lean_sql.update(ToolSession, {"phase": phase}, conversation_id=conversation_id, ended_at=None)


def _resumable(conversation_id: str) -> list[ResumableCall]:
    return [
        ResumableCall(
            s.id,
            s.tool_name,
            dict(s.arguments),
            s.journal_entries(),
            s.worker,
            abort_requested(s.commitment),
            {str(k): str(v) for k, v in (s.meta or {}).items()},
        )
        for s in ToolSession.objects.filter(
            conversation_id=conversation_id, status__in=ACTIVE_STATUSES
        ).order_by("created_at")
    ]


def on_record(
    conversation_id: str, owner: str, sessions: Any = None, session_key: str = ""
) -> OnRecord | None:
    """The conversation as a socket opening on it needs it, in one statement; None unless
    ``owner`` owns it (and, given the ``sessions`` model, unless the session ``session_key``
    is on record and has not expired)."""
    owned = Conversation.objects.filter(pk=conversation_id, owner=owner)
    if sessions is not None:
        live = sessions.objects.filter(session_key=session_key, expire_date__gt=timezone.now())
        owned = owned.filter(Exists(live))
    found = (
        owned.annotate(
            calls_open=Exists(
                ToolSession.objects.filter(conversation=OuterRef("pk"), status__in=ACTIVE_STATUSES)
            ),
            waiting=Exists(QueueEntry.objects.filter(conversation=OuterRef("pk"))),
        )
        .values_list("calls_open", "turn_worker", "turn_expires", "waiting")
        .first()
    )
    if found is None:
        return None
    calls_open, worker, expires, waiting = found
    live = expires is not None and expires >= timezone.now()
    return OnRecord(bool(calls_open), (worker or "") if live else "", bool(waiting))


FULL_MEMO = 1.0  # seconds a full queue's refusal is repeated without asking the database


class DjangoStore:
    """``ConversationStore`` on the Django ORM."""

    def __init__(self) -> None:
        # (conversation id, sender's address) → (until when, refusal): a visitor flooding a
        # full queue is refused from memory. A dequeue here forgets them all (the visitor's
        # other chats may have room again); one on another worker shows within FULL_MEMO.
        self._full: dict[tuple[str, str], tuple[float, CommandRefused]] = {}
        # Conversation id → its messages, read with its turn lease and kept (with what the
        # turn appends) until the lease is released: while this worker holds the lease, only
        # its turn appends to the conversation.
        self._histories: dict[str, list[dict[str, Any]]] = {}
        # Conversation id → its latest phase not written yet. A turn passes through several
        # phases in a few milliseconds; only the latest one needs writing, and queued phase
        # writes would delay the journal writes that wait behind them.
        self._phases: Latest[str] = Latest()

    async def messages(self, conversation_id: str) -> list[dict[str, Any]]:
        kept = self._histories.get(conversation_id)
        if kept is not None:
            return [dict(m) for m in kept]
        # Through the writer: it sees the appends queued before it (and carries them).
        messages: list[dict[str, Any]] = await write_now(_messages, conversation_id)
        return messages

    async def append(
        self, conversation_id: str, message_id: str, message: dict[str, Any], *, wait: bool = True
    ) -> None:
        kept = self._histories.get(conversation_id)
        if kept is not None:
            kept.append(read_back(message))
        if wait:
            await write_now(append_message, conversation_id, message_id, message)
        else:  # the writer's ordered lane: the next write or read that waits carries it
            write_soon(append_message, conversation_id, message_id, message)

    async def fork(
        self, conversation_id: str, message_id: str, *, edit: bool
    ) -> tuple[list[str], list[str]]:
        """The conversation forks at ``message_id`` (``chatbridge.records.forks``): the ids
        of the messages and tool calls abandoned. Made holding the conversation's lease,
        before its turn starts; the history kept with the lease is what the model reads now."""
        forked: tuple[Fork, list[dict[str, Any]]] = await write_now(
            _fork, conversation_id, message_id, edit
        )
        (messages, calls), kept = forked
        if conversation_id in self._histories:
            self._histories[conversation_id] = kept
        return messages, calls

    async def save_phase(self, conversation_id: str, phase: Phase) -> None:
        if phase == "done":  # ``release_turn`` writes it, in the statement that ends the turn
            return
        if self._phases.keep(conversation_id, phase):  # for the admin; off the hot path
            write_later(self._save_latest_phase, conversation_id)

    def _save_latest_phase(self, conversation_id: str) -> None:
        """On the writer's thread: the conversation's latest phase, and its live calls'."""
        phase = self._phases.take(conversation_id)
        if phase is not None:
            _save_phase(conversation_id, phase)

    async def resumable(self, conversation_id: str) -> list[ResumableCall]:
        return await db_call(_resumable, conversation_id)

    async def claim(self, call_id: str, worker: str) -> bool:
        return await db_call(lease.claim, call_id, worker)

    # -- MessageQueue: messages waiting for the running turn, durable -----------------------

    async def queued(self, conversation_id: str) -> list[QueuedMessage]:
        queued: list[QueuedMessage] = await write_now(message_queue.queued, conversation_id)
        return queued

    async def enqueue(self, conversation_id: str, message: QueuedMessage) -> None:
        now = time.monotonic()
        full_key = (conversation_id, message.address)
        memo = self._full.get(full_key)
        if memo is not None and memo[0] > now:
            raise memo[1]
        try:
            refused = await sync_to_async(message_queue.queue_full_refusal)(
                conversation_id, message.address
            )
            if refused is not None:  # read outside the writer: a dequeue queued in it counts
                refused = await write_now(
                    message_queue.queue_full_refusal, conversation_id, message.address
                )
            if refused is None:
                await write_now(message_queue.enqueue, conversation_id, message)
        except CommandRefused as lost_race:  # counted again under the lock: full after all
            refused = lost_race
        if refused is not None:
            if len(self._full) > 1000:  # forget the expired ones
                self._full = {k: v for k, v in self._full.items() if v[0] > now}
            self._full[full_key] = (now + FULL_MEMO, refused)
            raise refused

    async def dequeue(self, conversation_id: str, message_id: str) -> None:
        self._full.clear()
        # In order after the message's append, carried by the turn's read of the history.
        write_soon(message_queue.dequeue, conversation_id, message_id)

    # -- TurnLeases: one running turn per conversation across workers ----------------------
    # Taken and released through the writer: in order with the turn's writes (a release
    # queued behind its reply is done before the next take here is tried).

    async def take_turn(self, conversation_id: str, replacing: str = "") -> bool:
        return await self._take(conversation_id, replacing, new=False)

    # -- VisitorLimits: caps per visitor, counted across workers -----------------------------

    async def take_new_turn(
        self, conversation_id: str, replacing: str = "", *, address: str = ""
    ) -> bool:
        return await self._take(conversation_id, replacing, new=True, address=address)

    async def _take(
        self, conversation_id: str, replacing: str, *, new: bool, address: str = ""
    ) -> bool:
        history = await write_now(_take_and_read, conversation_id, replacing, new, address)
        if history is None:
            return False
        self._histories[conversation_id] = history
        return True

    async def renew_turn(self, conversation_id: str) -> bool:
        return await db_call(turn_leases.renew_turn, conversation_id)

    async def release_turn(self, conversation_id: str) -> bool:
        self._histories.pop(conversation_id, None)
        self._phases.drop(conversation_id)  # "done" supersedes a phase not written yet
        return bool(await write_now(turn_leases.release_turn, conversation_id))

    async def turn_holder(self, conversation_id: str) -> str:
        return await db_call(turn_leases.turn_holder, conversation_id)
