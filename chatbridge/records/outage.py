"""The database going away and coming back: telling an outage from other errors, and waiting
one out for a bounded time.

PostgreSQL restarted (a deploy, a failover) cuts off every connection; for a few seconds new
ones are refused. What the runtime writes and reads then is retried until the database is back,
for at most ``CHATBRIDGE_DB_RETRY_SECONDS``: the writes are idempotent (keyed by call and
journal slot, by message id), so a retry after a commit whose outcome was lost with its
connection writes nothing twice. Past that time the error is raised as before (a journal write
that did not happen stops its call). Pages are not retried: they answer 503 with
``Retry-After`` (``chatbridge.chat.unavailable``).

An outage is an ``OperationalError`` or ``InterfaceError`` after which the connection does not
work (or none could be had): a refused or cut-off connection, a pool that found none. The same
errors on a working connection (SQLite's "no such table", a deadlock) are not waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, connections

from chatbridge.conf import setting

__all__ = [
    "RETRY_AFTER",
    "DatabaseUnavailable",
    "away_within",
    "db_call",
    "is_outage",
    "note_away",
    "outlasted",
    "retry_seconds",
]

logger = logging.getLogger("chatbridge.db")

T = TypeVar("T")
J = TypeVar("J")

RETRY_AFTER = 5  # seconds a client is told to wait (HTTP Retry-After) before trying again
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 1.0


class DatabaseUnavailable(OperationalError):
    """The database cannot be reached (an outage, told apart from a failing statement)."""


_away_at: float | None = None  # when this process last found the database away (monotonic)


def note_away() -> None:
    """This process just found the database away (any thread)."""
    global _away_at
    _away_at = time.monotonic()


def away_within(seconds: float) -> bool:
    """Did this process find the database away in the last ``seconds``? Then what others
    could not write meanwhile (their heartbeats) says nothing of them."""
    return _away_at is not None and time.monotonic() - _away_at < seconds


def retry_seconds() -> float:
    """How long writes and reads wait for the database to come back."""
    return float(setting("CHATBRIDGE_DB_RETRY_SECONDS"))


def connection_broken(alias: str = "default") -> bool:
    """On the database thread: after an error, is this thread's connection gone or unusable?
    A broken one is closed (given back to the pool, which drops it), so the next statement
    takes a working connection."""
    connection = connections[alias]
    raw = connection.connection
    if raw is None:
        return True  # none could be had: refused, or the pool timed out
    if not getattr(raw, "closed", False) and connection.is_usable():
        return False
    with contextlib.suppress(Exception):
        connection.close()
    return True


def is_outage(exc: BaseException, alias: str = "default") -> bool:
    """On the database thread, right after ``exc`` (outside any transaction): was it the
    database going away?"""
    if isinstance(exc, DatabaseUnavailable):
        note_away()
        return True
    away = isinstance(exc, (OperationalError, InterfaceError)) and connection_broken(alias)
    if away:
        note_away()
    return away


def drop_failed_connection(alias: str = "default") -> None:
    """On the database thread, before a statement: a connection on which a statement failed
    is checked first, and dropped if the database went away meanwhile."""
    connection = connections[alias]
    if connection.connection is not None and connection.errors_occurred:
        if connection_broken(alias):
            return
        connection.errors_occurred = False


def _attempt(fn: Callable[..., T], *args: Any) -> T:
    drop_failed_connection()
    try:
        return fn(*args)
    except (OperationalError, InterfaceError) as exc:
        if isinstance(exc, DatabaseUnavailable) or not connection_broken():
            raise
        note_away()
        raise DatabaseUnavailable(str(exc)) from exc


async def db_call(fn: Callable[..., T], *args: Any, thread_sensitive: bool = True) -> T:
    """``fn(*args)`` (a synchronous ORM function that may be run again: a read, or a write
    that is idempotent) on the database thread, retried while the database is away, for up to
    ``retry_seconds()``; then ``DatabaseUnavailable``. ``thread_sensitive=False`` runs it on a
    thread of its own instead (for calls a request holding the database thread may wait for)."""
    run = sync_to_async(_attempt, thread_sensitive=thread_sensitive)
    loop = asyncio.get_running_loop()
    deadline: float | None = None
    delay = BACKOFF_FIRST
    while True:
        try:
            return await run(fn, *args)
        except DatabaseUnavailable as exc:
            now = loop.time()
            if deadline is None:
                deadline = now + retry_seconds()
                logger.warning("%s: the database is unavailable (%s); retrying", _name(fn), exc)
            if now >= deadline:
                raise
            await asyncio.sleep(min(delay, deadline - now))  # back off between attempts
            delay = min(delay * 2, BACKOFF_MAX)


def _name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", fn))


def outlasted(
    group: Sequence[J],
    outcomes: Sequence[BaseException | None],
    awaited: int,
    now: float,
    failing_since: dict[int, float],
) -> tuple[list[J], list[J], list[tuple[J, DatabaseUnavailable]]]:
    """The writer's ``group`` failed because the database is away (nothing of it is on
    record, or all of it is: it runs again whole). Its writes that have not waited
    ``retry_seconds()`` yet, ordered ones (its first ``awaited``) and background ones, in
    order, to go back to the head of their lanes; and the others, with their errors.
    ``failing_since`` keeps when each write (by id) first failed (empty: the outage begins,
    and is logged)."""
    patience = retry_seconds()
    if not failing_since:
        error = next((o for o in outcomes if o is not None), None)
        logger.warning(
            "the database is unavailable (%s: %s); writes wait for it up to %.0f s",
            type(error).__name__,
            error,
            patience,
        )
    keep: tuple[list[J], list[J]] = ([], [])
    failed: list[tuple[J, DatabaseUnavailable]] = []
    for n, (job, outcome) in enumerate(zip(group, outcomes, strict=True)):
        if now - failing_since.setdefault(id(job), now) < patience:
            keep[n >= awaited].append(job)
        else:
            failing_since.pop(id(job), None)
            gone = DatabaseUnavailable(str(outcome or "the database is unavailable"))
            gone.__cause__ = outcome
            failed.append((job, gone))
    return keep[0], keep[1], failed
