"""Django's PostgreSQL backend, its pool checking a connection at most once a second.

With ``CONN_HEALTH_CHECKS`` Django gives the pool psycopg's ``ConnectionPool.check_connection``,
run on every checkout; this backend swaps it for ``chatbridge.records.pool_check``'s (the same
check, skipped for a connection that passed less than a second ago). Django builds the pool
itself and takes no other check, so the swap is made on the pool it built; should psycopg's
pool keep its check elsewhere one day, Django's check stays and nothing else changes.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base

from chatbridge.records.pool_check import check_connection

__all__ = ["DatabaseWrapper"]


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> Any:
        pool = super().pool
        if pool is not None and getattr(pool, "_check", None) is not None:
            pool._check = check_connection
        return pool
