"""The durable queue of messages sent while a conversation's turn runs, with its caps per
conversation, per visitor and per client address (each entry keeps its sender's address while
it waits)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from chatbridge.conf import setting
from chatbridge.engine.conversation import CommandRefused
from chatbridge.engine.turns import QueuedMessage, queue_full
from chatbridge.records import lean_sql
from chatbridge.records.models import Conversation, QueueEntry
from chatbridge.records.visitor_caps import (
    ADDRESS_QUEUE_LOCK,
    QUEUE_LOCK,
    at_least,
    lock_owner,
    queue_full_here,
)

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


def _per_address(address: str) -> int | None:
    return setting("CHATBRIDGE_QUEUE_PER_ADDRESS") if address else None


def _queue_refusal(conversation_id: str, owner: str, address: str) -> CommandRefused | None:
    """Why a message sent from ``address`` may not join the conversation's queue now (None: it
    may). Up to three reads of at most a cap's worth of index entries each."""
    per_chat = setting("CHATBRIDGE_QUEUE_PER_CONVERSATION")
    per_visitor = setting("CHATBRIDGE_QUEUE_PER_VISITOR")
    per_address = _per_address(address)
    here = QueueEntry.objects.filter(conversation_id=conversation_id)
    if per_chat is not None and at_least(here, per_chat):
        return queue_full(per_chat)
    if per_visitor is not None and at_least(QueueEntry.objects.filter(owner=owner), per_visitor):
        return queue_full(per_visitor, visitor=True)
    if per_address is not None and at_least(
        QueueEntry.objects.filter(address=address), per_address
    ):
        return queue_full_here(per_address)
    return None


def queue_full_refusal(conversation_id: str, address: str = "") -> CommandRefused | None:
    """The refusal, read without a transaction or the writer: a flood past the caps costs
    reads, and the writes of everyone else do not wait behind it."""
    return _queue_refusal(conversation_id, _owner(conversation_id), address)


def enqueue(conversation_id: str, message: QueuedMessage) -> None:
    """One INSERT, after the caps are counted again under the visitor's (and the sender's
    address's) lock."""
    with transaction.atomic():
        if QueueEntry.objects.filter(message_id=message.id).exists():
            return  # queued by a run whose commit was cut off (the database went away)
        owner = _owner(conversation_id)
        lock_owner(QUEUE_LOCK, owner)
        address = message.address if _per_address(message.address) is not None else ""
        if address:
            lock_owner(ADDRESS_QUEUE_LOCK, address)
        if (refused := _queue_refusal(conversation_id, owner, address)) is not None:
            raise refused
        lean_sql.insert(
            QueueEntry,
            {
                "conversation_id": conversation_id,
                "owner": owner,
                "message_id": message.id,
                "text": message.text,
                "client_id": message.client_id or "",
                "address": address,
                "created_at": timezone.now(),
            },
        )


def dequeue(conversation_id: str, message_id: str) -> None:
    """Remove the message (it is in the conversation now); nothing if it is not queued."""
    QueueEntry.objects.filter(conversation_id=conversation_id, message_id=message_id).delete()
