"""Retention of finished calls: ended tool sessions older than ``CHATBRIDGE_RETENTION_DAYS``
are deleted with what hangs off them (journal entries, that is the answers; the links of URL
questions; log lines, kept on the row), in batches. Live and suspended calls are never
deleted, however old: only a call with a final status and an end time is.

``manage.py chatbridge_sessions purge`` runs it on demand; each process's runtime runs it in
the background at most once an hour (``Retention``).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from chatbridge.conf import setting
from chatbridge.records.models import ACTIVE_STATUSES, ElicitLink, JournalRecord, ToolSession
from chatbridge.records.periodic import Periodic

__all__ = [
    "BATCH",
    "DELAY",
    "EVERY",
    "Retention",
    "cutoff",
    "expired",
    "purge",
    "purge_batch",
    "purge_links",
]

logger = logging.getLogger("chatbridge.retention")

BATCH = 200  # calls deleted per transaction: short ones, so other writes slip in between
EVERY = 3600.0  # seconds between background purges of a process
DELAY = 60.0  # seconds from a runtime's start to its first purge: starting stays quick
last_purge: float | None = None  # when this process last purged (monotonic clock)


def cutoff(days: float | None = None) -> datetime | None:
    """Calls that ended before this are past retention (None: keep every call)."""
    if days is None:
        days = setting("CHATBRIDGE_RETENTION_DAYS")
    return None if days is None else timezone.now() - timedelta(days=days)


def expired(before: datetime) -> QuerySet[ToolSession]:
    """Ended calls that ended before ``before`` (rows of older releases without an end time:
    by their last update)."""
    ended = Q(ended_at__lt=before) | Q(ended_at__isnull=True, updated_at__lt=before)
    return ToolSession.objects.exclude(status__in=ACTIVE_STATUSES).filter(ended)


def purge_batch(before: datetime, batch: int = BATCH) -> int:
    """Delete up to ``batch`` calls past retention in one transaction; how many went."""
    ids = list(expired(before).order_by().values_list("id", flat=True)[:batch])
    if not ids:
        return 0
    with transaction.atomic():
        JournalRecord.objects.filter(session_id__in=ids).delete()
        ElicitLink.objects.filter(call_id__in=ids).delete()
        # Checked again in the statement: a call is never deleted unless it is still ended.
        ToolSession.objects.filter(pk__in=ids).exclude(status__in=ACTIVE_STATUSES).delete()
    return len(ids)


def purge_links(before: datetime, batch: int = BATCH) -> int:
    """Delete up to ``batch`` links that expired before ``before`` and belong to no live call
    (left by calls deleted otherwise, e.g. ``prune``); how many went."""
    live = ToolSession.objects.filter(status__in=ACTIVE_STATUSES).values("id")
    old = ElicitLink.objects.filter(expires_at__lt=before).exclude(call_id__in=live)
    ids = list(old.order_by().values_list("id", flat=True)[:batch])
    ElicitLink.objects.filter(pk__in=ids).delete()
    return len(ids)


def purge(days: float | None = None, *, batch: int = BATCH) -> int:
    """Delete every call past retention (``days``, default the setting), batch by batch;
    how many calls went (expired links of calls gone already go too)."""
    before = cutoff(days)
    if before is None:
        return 0
    total = 0
    while deleted := purge_batch(before, batch):
        total += deleted
    while purge_links(before, batch):
        pass
    return total


class Retention(Periodic):
    """The runtime's background purge: ``delay`` seconds after the start, then at most once
    per ``every`` seconds in this process, a batch at a time, each a short transaction."""

    def __init__(self, every: float = EVERY, delay: float = DELAY) -> None:
        what = "purging ended calls"
        super().__init__("chatbridge-retention", self.run_once, every=every, delay=delay, what=what)
        self.deleted = 0  # calls deleted by this runtime's passes

    async def run_once(self) -> int:
        """Purge, unless this process did less than ``every`` seconds ago."""
        global last_purge
        now = time.monotonic()
        if last_purge is not None and now - last_purge < self.every:
            return 0
        last_purge = now
        before = await sync_to_async(cutoff)()
        if before is None:
            return 0
        deleted = 0
        while batch := await sync_to_async(purge_batch)(before):
            deleted += batch
        while await sync_to_async(purge_links)(before):
            pass
        self.deleted += deleted
        if deleted:
            logger.info("deleted %d ended call(s) past retention", deleted)
        return deleted
