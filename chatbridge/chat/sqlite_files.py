"""A SQLite database holds every conversation, answer and journal: only its owner may read it.

SQLite creates the database with the process's umask (usually 0644, world-readable) and its
``-wal`` and ``-shm`` files with the database's mode. Each new connection makes the three
private (0600); once the database is, SQLite creates the other two private as well.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

__all__ = ["make_private"]

PRIVATE = 0o600


def make_private(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """``connection_created`` receiver: a SQLite connection's files become 0600."""
    if connection.vendor != "sqlite":
        return
    name = str(connection.settings_dict["NAME"])
    if name == ":memory:" or name.startswith("file:"):
        return
    for path in (name, f"{name}-wal", f"{name}-shm", f"{name}-journal"):
        with contextlib.suppress(FileNotFoundError):
            if stat.S_IMODE(os.stat(path).st_mode) & 0o077:
                os.chmod(path, PRIVATE)
