"""The durable queue of messages sent while a conversation's turn runs, with its caps per
conversation and per visitor."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from chatbridge.chat.models import Conversation, QueueEntry
from chatbridge.conf import setting
from chatbridge.engine.conversation import CommandRefused
from chatbridge.engine.turns import QueuedMessage, queue_full
from chatbridge.records import lean_sql
from chatbridge.records.visitor_caps import QUEUE_LOCK, at_least, lock_owner

__all__ = ["dequeue", "enqueue", "queue_full_refusal", "queued"]


def queued(conversation_id: str) -> list[QueuedMessage]:
    """The conversation's queued messages, oldest first."""
    columns = ("message_id", "text", "client_id")
    return [
        QueuedMessage(message_id, text, client_id or None)
        for message_id, text, client_id in lean_sql.rows(
            QueueEntry, columns, "id", conversation_id=conversation_id
        )
    ]


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
    if per_chat is not None and at_least(here, per_chat):
        return queue_full(per_chat)
    if per_visitor is not None and at_least(QueueEntry.objects.filter(owner=owner), per_visitor):
        return queue_full(per_visitor, visitor=True)
    return None


def queue_full_refusal(conversation_id: str) -> CommandRefused | None:
    """The refusal, read without a transaction or the writer: a flood past the caps costs
    reads, and the writes of everyone else do not wait behind it."""
    return _queue_refusal(conversation_id, _owner(conversation_id))


def enqueue(conversation_id: str, message: QueuedMessage) -> None:
    """One INSERT, after the caps are counted again under the visitor's lock."""
    with transaction.atomic():
        if QueueEntry.objects.filter(message_id=message.id).exists():
            return  # queued by a run whose commit was cut off (the database went away)
        owner = _owner(conversation_id)
        lock_owner(QUEUE_LOCK, owner)
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


def dequeue(conversation_id: str, message_id: str) -> None:
    """Remove the message (it is in the conversation now); nothing if it is not queued."""
    QueueEntry.objects.filter(conversation_id=conversation_id, message_id=message_id).delete()
