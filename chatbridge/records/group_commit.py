"""A group of writes on the database thread: one transaction (a savepoint for each write that
must fail alone, once one did), and whether the database went away meanwhile (``Writer`` in
``chatbridge.records.writer`` queues the writes and hands them over in groups)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections, connections, transaction

from chatbridge.records.outage import connection_broken

__all__ = ["Job", "Outcome", "nothing", "run_group", "undo_on_retry"]

Outcome = BaseException | None
_Undo = Callable[[], None]


@dataclass(slots=True)
class Job:
    """A write: its function and arguments, the future of its outcome (none for a background
    write nobody waits for), and whether a caller waits for it now (a ``write_now``)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    done: asyncio.Future[Any] | None = None
    urgent: bool = False


def run_group(group: list[Job]) -> tuple[list[Outcome], list[Any], bool]:
    """On the database thread: every write of ``group`` in one transaction.

    A write someone waits for must fail alone (rolled back, its caller gets the error), and so
    must every write on PostgreSQL, where a failed statement spoils the transaction. SQLite
    undoes a failed statement alone: its background writes go without. The group first runs
    without a savepoint for any write (two statements less each: writes rarely fail); if one
    that must fail alone fails, the transaction is rolled back, what the writes took from
    memory is put back (``undo_on_retry``), and the group runs again with a savepoint for each
    such write. If the transaction itself fails (the connection broke), every write not failed
    already fails with that error, and the connection is dropped.

    What each write returned comes second; third, whether the group failed because the
    database went away (its connection is broken, or none could be had): then it runs again,
    whole, and what its writes took from memory has been put back."""
    if all(job.fn is nothing for job in group):  # only flush barriers: nothing to write
        return [None] * len(group), [None] * len(group), False
    if _stale():
        close_old_connections()
    if len(group) > 1:
        try:
            return _attempt(group, isolate=False)
        except _OneMustFailAlone:  # not the database gone: that is an outage, as below
            pass  # rolled back, and what it took put back: again, each such write apart
    return _attempt(group, isolate=True)


class _OneMustFailAlone(Exception):
    """A write that must fail alone failed in a group run without savepoints."""


def _attempt(group: list[Job], *, isolate: bool) -> tuple[list[Outcome], list[Any], bool]:
    outcomes: list[Outcome] = [None] * len(group)
    values: list[Any] = [None] * len(group)
    every_one = connections["default"].vendor != "sqlite"
    undo: list[_Undo] = []
    _undo.callbacks = undo
    raw: Any = None  # the connection the group started on
    outer_failed = False
    try:
        with transaction.atomic():
            raw = connections["default"].connection
            if len(group) == 1:  # its own transaction isolates it
                values[0] = group[0].fn(*group[0].args)
            else:
                for n, job in enumerate(group):
                    alone = job.done is not None or every_one
                    try:
                        if alone and isolate:
                            with transaction.atomic():
                                values[n] = job.fn(*job.args)
                        else:
                            values[n] = job.fn(*job.args)
                    except Exception as exc:
                        if alone and not isolate:
                            raise _OneMustFailAlone from exc
                        outcomes[n] = exc
                        if not alone:  # SQLite undid it alone
                            transaction.set_rollback(False)
    except _OneMustFailAlone as failed:
        for callback in reversed(undo):
            callback()
        connection = connections["default"]
        if raw is None or connection.connection is not raw or connection_broken():
            cause = failed.__cause__  # gone away: the group runs again whole, later
            return [cause] * len(group), values, True
        raise
    except Exception as exc:
        outcomes = [outcome or exc for outcome in outcomes]
        outer_failed = True
    finally:
        _undo.callbacks = None
    if all(outcome is None for outcome in outcomes):
        return outcomes, values, False
    # Gone away: none could be had, the broken one was dropped (and another taken) on the way
    # out of the transaction, or the one kept does not work.
    connection = connections["default"]
    if raw is None or connection.connection is not raw or connection_broken():
        for callback in reversed(undo):
            callback()
        return outcomes, values, True
    if outer_failed and (len(group) > 1 or connection.errors_occurred):
        with contextlib.suppress(Exception):
            connection.close()
    return outcomes, values, False


_undo = threading.local()  # the undo callbacks of the group running on this thread


def undo_on_retry(callback: _Undo) -> None:
    """Called by a write that took data from memory: ``callback`` puts it back, should the
    write have to run again (its group failed because the database went away)."""
    callbacks: list[_Undo] | None = getattr(_undo, "callbacks", None)
    if callbacks is not None:
        callbacks.append(callback)


def _stale() -> bool:
    """Whether the writer's connection must be checked: a statement on it failed. (Its age
    does not count: the writer keeps its one connection for as long as it runs.)"""
    connection = connections["default"]
    return connection.connection is not None and bool(connection.errors_occurred)


def nothing() -> None:
    return None
