"""Which workers are alive: a heartbeat row per worker in the database, and on this host the
process itself."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

from django.utils import timezone

from chatbridge.chat.models import WorkerHeartbeat
from chatbridge.records.recorder import WORKER_ID

__all__ = [
    "HEARTBEAT_SECONDS",
    "HEARTBEAT_TTL",
    "beat",
    "forget_worker",
    "live_workers",
    "worker_alive",
]

HEARTBEAT_SECONDS = 2.0  # how often a worker says it is alive
HEARTBEAT_TTL = 10.0  # silent this long: the worker is gone and its calls may be taken over


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


def live_workers() -> list[str]:
    """The workers whose heartbeat is recent (this one included once it has beaten)."""
    since = timezone.now() - timedelta(seconds=HEARTBEAT_TTL)
    return list(WorkerHeartbeat.objects.filter(beat_at__gte=since).values_list("worker", flat=True))
