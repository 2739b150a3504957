"""Turn leases: one running turn per conversation across workers (a lease in the database,
taken by compare-and-set and renewed while the turn runs), and the cap on a visitor's running
turns."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from chatbridge.chat.models import FINAL_PHASE, Conversation, QueueEntry, ToolSession
from chatbridge.conf import setting
from chatbridge.engine.conversation import too_many_running
from chatbridge.records import lean_sql
from chatbridge.records.recorder import WORKER_ID
from chatbridge.records.visitor_caps import TURN_LOCK, at_least, lock_owner

__all__ = [
    "LEASE_SECONDS",
    "release_turn",
    "renew_turn",
    "take_new_turn",
    "take_turn",
    "turn_holder",
]

LEASE_SECONDS = 20.0  # a turn's lease, renewed every few seconds while it runs


def take_turn(conversation_id: str, replacing: str) -> bool:
    """Take the conversation's lease if it is free, ours, expired or held by ``replacing``."""
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


def take_new_turn(conversation_id: str, replacing: str) -> bool:
    """``take_turn`` for a new turn: refused (``too_many_running``) past the visitor's cap."""
    cap = setting("CHATBRIDGE_RUNNING_TURNS_PER_VISITOR")
    if cap is None:
        return take_turn(conversation_id, replacing)
    with transaction.atomic():
        found = lean_sql.select(Conversation, ("owner",), id=conversation_id)
        if found is None:
            return False
        lock_owner(TURN_LOCK, found[0])
        # The lease first: a chat whose turn runs elsewhere is BUSY (its message may be
        # queued), not over the cap. Over the cap, the refusal rolls the lease back.
        if not take_turn(conversation_id, replacing):
            return False
        busy = (
            Conversation.objects.filter(owner=found[0], turn_expires__gte=timezone.now())
            .exclude(turn_worker="")
            .exclude(pk=conversation_id)
        )
        if at_least(busy, cap):
            raise too_many_running(cap)
        return True


def renew_turn(conversation_id: str) -> bool:
    """Push our lease on; False if it is no longer ours."""
    expires = timezone.now() + timedelta(seconds=LEASE_SECONDS)
    renewed = Conversation.objects.filter(pk=conversation_id, turn_worker=WORKER_ID).update(
        turn_expires=expires
    )
    return renewed == 1


def release_turn(conversation_id: str) -> bool:
    """Give our lease up (a lease that is no longer ours is left alone) and record the phase
    ``done``, in one transaction with the answer to whether messages wait in the queue."""
    with transaction.atomic():
        released = Conversation.objects.filter(pk=conversation_id, turn_worker=WORKER_ID).update(
            turn_worker="", turn_expires=None, phase=FINAL_PHASE
        )
        if released:
            lean_sql.update(
                ToolSession, {"phase": FINAL_PHASE}, conversation_id=conversation_id, ended_at=None
            )
        return QueueEntry.objects.filter(conversation_id=conversation_id).exists()


def turn_holder(conversation_id: str) -> str:
    """The worker whose lease on the conversation has not expired, or ""."""
    row = (
        Conversation.objects.filter(pk=conversation_id, turn_expires__gte=timezone.now())
        .values_list("turn_worker", flat=True)
        .first()
    )
    return row or ""
