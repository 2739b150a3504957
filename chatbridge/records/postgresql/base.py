"""Django's PostgreSQL backend, its pool checking a connection at most once a second.

With ``CONN_HEALTH_CHECKS`` Django gives the pool psycopg's ``ConnectionPool.check_connection``,
run on every checkout; this backend swaps it for ``chatbridge.records.pool_check``'s (the same
check, skipped for a connection that passed less than a second ago). Django builds the pool
itself and takes no other check, so the swap is made on the pool it built; should psycopg's
pool keep its check elsewhere one day, Django's check stays and nothing else changes.

The pool re-makes its connections after the database went away every second, not with
psycopg's doubling backoff (1, 2, 4 … s between attempts): after an outage of 40 s that would
leave the next attempt up to half a minute after the database is back, every request failing
meanwhile (a refused connection costs a round trip; a worker tries once a second).
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base
from psycopg_pool.base import AttemptWithBackoff

from chatbridge.records.pool_check import check_connection

__all__ = ["RECONNECT_EVERY", "DatabaseWrapper"]

RECONNECT_EVERY = 1.0  # seconds between the pool's attempts to reconnect (± 10 %)
AttemptWithBackoff.INITIAL_DELAY = RECONNECT_EVERY
AttemptWithBackoff.DELAY_BACKOFF = 1.0  # every attempt a second after the last, not doubling


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> Any:
        pool = super().pool
        if pool is not None and getattr(pool, "_check", None) is not None:
            pool._check = check_connection
        return pool
