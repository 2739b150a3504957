"""Turn leases: one running turn per conversation across workers (a lease in the database,
taken by compare-and-set and renewed while the turn runs), and the caps on the running turns of
a visitor and of a client address (the address that started a turn is kept on the
conversation's row while the turn runs)."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from chatbridge.conf import setting
from chatbridge.engine.conversation import too_many_running
from chatbridge.records import lean_sql
from chatbridge.records.models import FINAL_PHASE, Conversation, QueueEntry, ToolSession
from chatbridge.records.recorder import WORKER_ID
from chatbridge.records.visitor_caps import (
    ADDRESS_TURN_LOCK,
    TURN_LOCK,
    at_least,
    lock_owner,
    too_many_running_here,
)

__all__ = [
    "LEASE_SECONDS",
    "release_turn",
    "renew_turn",
    "take_new_turn",
    "take_turn",
    "turn_holder",
]

LEASE_SECONDS = 20.0  # a turn's lease, renewed every few seconds while it runs


def take_turn(conversation_id: str, replacing: str, address: str | None = None) -> bool:
    """Take the conversation's lease if it is free, ours, expired or held by ``replacing``;
    a new turn records the ``address`` that started it (None: a turn resumed or started from
    the queue keeps the one on record)."""
    now = timezone.now()
    free = (
        Q(turn_worker="")
        | Q(turn_worker=WORKER_ID)
        | Q(turn_expires__isnull=True)
        | Q(turn_expires__lt=now)
    )
    if replacing:
        free |= Q(turn_worker=replacing)
    lease: dict[str, object] = {
        "turn_worker": WORKER_ID,
        "turn_expires": now + timedelta(seconds=LEASE_SECONDS),
    }
    if address is not None:
        lease["turn_address"] = address
    taken = Conversation.objects.filter(pk=conversation_id).filter(free).update(**lease)
    return taken == 1


def take_new_turn(conversation_id: str, replacing: str, *, address: str = "") -> bool:
    """``take_turn`` for a new turn, sent from ``address`` ("": not known): refused
    (``TOO_MANY_RUNNING``) past the visitor's cap, or past the address's."""
    cap = setting("CHATBRIDGE_RUNNING_TURNS_PER_VISITOR")
    here = setting("CHATBRIDGE_RUNNING_TURNS_PER_ADDRESS") if address else None
    if cap is None and here is None:
        return take_turn(conversation_id, replacing, "")
    with transaction.atomic():
        found = lean_sql.select(Conversation, ("owner",), id=conversation_id)
        if found is None:
            return False
        if cap is not None:
            lock_owner(TURN_LOCK, found[0])
        if here is not None:
            lock_owner(ADDRESS_TURN_LOCK, address)
        # The lease first: a chat whose turn runs elsewhere is BUSY (its message may be
        # queued), not over the cap. Over the cap, the refusal rolls the lease back.
        if not take_turn(conversation_id, replacing, address if here is not None else ""):
            return False
        busy = (
            Conversation.objects.filter(turn_expires__gte=timezone.now())
            .exclude(turn_worker="")
            .exclude(pk=conversation_id)
        )
        if cap is not None and at_least(busy.filter(owner=found[0]), cap):
            raise too_many_running(cap)
        if here is not None and at_least(busy.filter(turn_address=address), here):
            raise too_many_running_here(here)
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
            turn_worker="", turn_expires=None, turn_address="", phase=FINAL_PHASE
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
