"""Which workers are alive: a heartbeat row per worker in the database, and on this host the
process itself."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta
from pathlib import Path

from django.db import DatabaseError
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from chatbridge.records.models import ACTIVE_STATUSES, ToolSession, WorkerHeartbeat
from chatbridge.records.outage import away_within, note_away
from chatbridge.records.recorder import WORKER_ID

__all__ = [
    "HEARTBEAT_SECONDS",
    "HEARTBEAT_TTL",
    "beat",
    "forget_worker",
    "holder_alive_elsewhere",
    "live_workers",
    "worker_alive",
]

HEARTBEAT_SECONDS = 2.0  # how often a worker says it is alive
HEARTBEAT_TTL = 10.0  # silent this long: the worker is gone and its calls may be taken over


def beat() -> None:
    """Say this worker is alive (a row per worker, its time pushed on)."""
    try:
        WorkerHeartbeat.objects.update_or_create(
            worker=WORKER_ID, defaults={"beat_at": timezone.now()}
        )
    except DatabaseError:
        note_away()  # nobody could beat meanwhile, most likely
        raise


def forget_worker() -> None:
    """This worker stops (a clean shutdown): its calls may be taken over at once."""
    WorkerHeartbeat.objects.filter(worker=WORKER_ID).delete()


def _process_gone(worker: str) -> bool:
    """``worker`` (``host:pid``) ran on this host and its process no longer runs: it does not
    exist, or it is a zombie (killed, and not yet reaped by whoever started it)."""
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by someone else
        pass
    return _zombie(int(pid))


def _zombie(pid: int) -> bool:
    """Has process ``pid`` exited, waiting only to be reaped (Linux's /proc says so)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc here, or it has gone meanwhile
        return False
    state = stat.rpartition(")")[2].split()  # after the name, which may hold anything
    return bool(state) and state[0] in ("Z", "X")


def worker_alive(worker: str) -> bool:
    """Is ``worker`` alive? Its heartbeat is recent (and, on this host, its process exists).

    Liveness comes from the database, never from the channel layer: a worker whose Redis is
    down keeps its calls. A heartbeat that aged while the database was away (this process
    found it away in the last ``HEARTBEAT_TTL``) proves nothing: nobody could beat then, so
    its worker counts as alive until it has had the time to beat again. A worker with no
    heartbeat at all (never beat, or stopped cleanly) is gone.
    """
    if not worker or _process_gone(worker):
        return False
    beat_at = WorkerHeartbeat.objects.filter(worker=worker).values_list("beat_at", flat=True)
    return _beating(beat_at.first())


def _beating(last: datetime | None) -> bool:
    """Does a worker whose last heartbeat was at ``last`` count as alive (see ``worker_alive``)?"""
    if last is None:
        return False
    return last >= timezone.now() - timedelta(seconds=HEARTBEAT_TTL) or away_within(HEARTBEAT_TTL)


def holder_alive_elsewhere(call_id: str) -> str | None:
    """The other worker, alive by ``worker_alive``'s rules, that holds the live call; None if
    the call has ended (or is unknown), is held here, or its holder is gone. One statement:
    the call's lease and its holder's heartbeat, read together (what a request for a call held
    elsewhere routes by)."""
    beat_at = WorkerHeartbeat.objects.filter(worker=OuterRef("worker")).values("beat_at")[:1]
    found = (
        ToolSession.objects.filter(pk=call_id, status__in=ACTIVE_STATUSES)
        .annotate(beat=Subquery(beat_at))
        .values_list("worker", "beat")
        .first()
    )
    if found is None:
        return None
    holder, last = found
    if not holder or holder == WORKER_ID or _process_gone(holder) or not _beating(last):
        return None
    return str(holder)


def live_workers() -> list[str]:
    """The workers alive by ``worker_alive``'s rules (this one included once it has beaten)."""
    rows = WorkerHeartbeat.objects.all()
    if not away_within(HEARTBEAT_TTL):
        rows = rows.filter(beat_at__gte=timezone.now() - timedelta(seconds=HEARTBEAT_TTL))
    beating = rows.values_list("worker", flat=True)
    return [worker for worker in beating if not _process_gone(worker)]
