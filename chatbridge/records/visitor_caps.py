"""How a cap per visitor holds across workers: the count and the write it allows happen under
the visitor's advisory lock (PostgreSQL), and a count reads no further than the cap."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import QuerySet

__all__ = ["QUEUE_LOCK", "TURN_LOCK", "at_least", "lock_owner"]

# PostgreSQL: an enqueue holds this advisory lock (with the owner's hash) to its commit, so
# the workers' counts of one visitor's queue cannot race past the cap.
QUEUE_LOCK = 4251
# PostgreSQL: a capped turn start holds this advisory lock (with the owner's hash) to its
# commit, so workers starting a visitor's turns at once count them one after the other.
TURN_LOCK = 4252


def lock_owner(kind: int, owner: str) -> None:
    """On PostgreSQL, take the transaction's advisory lock ``kind`` for ``owner``: counts
    and the write they allow happen one worker at a time. Elsewhere nothing (SQLite has one
    writer at a time)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [kind, owner])


def at_least(rows: QuerySet[Any], limit: int) -> bool:
    """Whether ``rows`` holds ``limit`` rows or more, reading at most ``limit`` of them."""
    return limit <= 0 or rows[limit - 1 : limit].exists()
