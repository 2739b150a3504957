"""The PostgreSQL pool's check of a connection before it hands it out, at most once a second.

psycopg's ``ConnectionPool.check_connection`` (what Django's ``CONN_HEALTH_CHECKS`` installs)
sends an empty query on every checkout: a round trip, and a transaction in PostgreSQL's own
count, for each request, socket and database call (five of a chat booking's 25). Here a
connection checked less than ``CHECK_AFTER`` seconds ago is handed out unchecked: one that a
restart killed is still found (a restart is longer than that), and a page that meets one within
that second of the restart gets the 503 it would get during the restart anyway. No Django
import: the settings name it.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

__all__ = ["CHECK_AFTER", "check_connection"]

CHECK_AFTER = 1.0  # seconds a connection that passed the check is trusted

_clock = time.monotonic  # (a test sets its own)
_checked: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
_lock = threading.Lock()  # the pool checks on the threads that take connections


def check_connection(conn: Any) -> None:
    """Raise if ``conn`` does not work (psycopg's check), unless it passed less than
    ``CHECK_AFTER`` seconds ago."""
    from psycopg_pool import ConnectionPool

    now = _clock()
    with _lock:
        last = _checked.get(conn)
    if last is not None and now - last < CHECK_AFTER:
        return
    ConnectionPool.check_connection(conn)
    with _lock:
        _checked[conn] = now
