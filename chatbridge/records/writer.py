"""The process's database writer: writes leave the critical path, in order, in groups.

A ``Writer`` is owned by the process's runtime, which starts and closes it (closing waits for
every queued write). On PostgreSQL writes run on the writer's own thread and connection, never
behind the reads of sockets and views; on SQLite, on the thread (and connection) every other
database call uses (one writer at a time: two connections would wait for each other's locks).
Writes run as groups, one transaction per group (one thread hop and one commit for many), a
write that fails rolled back and reported alone while its group commits.

Two lanes, each in order:

- **ordered writes**: ``write_now`` (the journal entry that must exist before a tool acts on
  an answer, a question before it is shown; it may also read, and hands back what its function
  returns) runs in the next group, ahead of background writes queued earlier, which ride along
  in the same transaction (their commit is paid already); a failed one raises in the caller.
  ``write_soon`` (a message, a call's row: what must be on record in order, but before nothing
  in particular) joins this lane without waiting: it lingers like a background write, and the
  next ``write_now`` carries it, in order, in its own group. It hands back a future of its
  outcome (a failure is also logged). What may be overtaken is written so that the order does
  not matter (status snapshots are superseded by a call's end, requests never overwrite an
  answered entry, phases skip ended calls);
- **background writes** (``write_later``: status, phases, requests, log lines) linger up to
  ``LINGER`` seconds so that more join their group: under load one commit carries the writes of
  many calls, and they stay off the thread while replies are being sent.

``flush`` waits for every write queued before it; the functions of this module reach the
writer of the running runtime.

While the database is away (a restart) a group that failed for that reason runs again, whole
and in order, until the database is back or its writes have waited
``CHATBRIDGE_DB_RETRY_SECONDS`` (then they fail). So every write must be idempotent (a group
whose commit was cut off may have committed); one that takes data kept in memory (coalesced
status, phase and log writes, each in a ``Latest`` of the recorder or store that writes it)
says with ``undo_on_retry`` how to put it back.

A group runs on the database thread (``run_group``): one transaction, a savepoint for each write
that must fail alone once one did, and a look at whether the database went away meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections, transaction

from chatbridge.records.outage import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    connection_broken,
    outlasted,
)

__all__ = [
    "LINGER",
    "MAX_GROUP",
    "Latest",
    "Writer",
    "WriterNotRunning",
    "flush",
    "undo_on_retry",
    "write_later",
    "write_now",
    "write_soon",
]

logger = logging.getLogger("chatbridge.writer")

MAX_GROUP = 256  # writes committed together at most
LINGER = 0.1  # seconds a group of background writes gathers more


# -- a group of writes, on the database thread ----------------------------------------------

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


# -- the writer: queues, lanes, groups handed to the database thread -------------------------


class WriterNotRunning(RuntimeError):
    """A write was asked for while no runtime's writer runs (start the runtime first)."""


class Writer:
    """The two lanes of ORM writes, the task that hands them over in groups, and the thread
    (with its own database connection) that runs them."""

    def __init__(self, *, linger: float = LINGER) -> None:
        self._linger = linger  # how long a background group gathers more (``LINGER``)
        self._awaited: deque[Job] = deque()
        self._background: deque[Job] = deque()  # flush barriers too (they carry a future)
        self._barriers = 0  # flush barriers in ``_background``: no lingering while any wait
        self._urgent = 0  # ``write_now`` jobs in ``_awaited``: no lingering while any wait
        self._due = 0.0  # loop time by which the oldest background write must start
        self._wake: asyncio.Event | None = None  # something is queued
        self._hurry: asyncio.Event | None = None  # something queued must not linger
        self._task: asyncio.Task[None] | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._closing = False
        # Loop time at which each write waiting for the database first failed, by the id of
        # its job (a job stays queued while it waits, so its id stays its own).
        self._failing_since: dict[int, float] = {}
        self._backoff = BACKOFF_FIRST

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done() and not self._closing

    async def start(self) -> None:
        """Start the writer task on the running loop and make it the process's writer."""
        global _active
        if self._task is not None:
            raise RuntimeError("this Writer was started already")
        self._wake, self._hurry = asyncio.Event(), asyncio.Event()
        if connections["default"].vendor != "sqlite":
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="chatbridge-writer")
        self._task = asyncio.create_task(self._work(), name="chatbridge-db-writer")
        _active = self

    async def aclose(self) -> None:
        """Run every write queued so far, then stop (and close the writer's connection)."""
        global _active
        if self._task is None or self._closing:
            return
        self._closing = True
        try:
            await self._barrier()
        finally:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            if self._thread is not None:
                loop = asyncio.get_running_loop()
                with contextlib.suppress(Exception):
                    await loop.run_in_executor(self._thread, connections.close_all)
                self._thread.shutdown(wait=True)
            if _active is self:
                _active = None

    def later(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)`` (a sync ORM function) in the background lane; return at once."""
        self._check()
        self._start_lingering()
        self._background.append(Job(fn, args))
        self._signal(hurry=False)

    def soon(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Queue ``fn(*args)`` in the ordered lane without waiting: it runs in the group of the
        next ``now`` (or once its linger is over). The future of its outcome."""
        self._check()
        done = asyncio.get_running_loop().create_future()
        done.add_done_callback(_report_failure)
        self._start_lingering()
        self._awaited.append(Job(fn, args, done))
        self._signal(hurry=False)
        return done

    async def now(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` in the next group (after the ordered writes queued before it) and
        wait until it is done; what it returns."""
        self._check()
        done = asyncio.get_running_loop().create_future()
        self._awaited.append(Job(fn, args, done, urgent=True))
        self._urgent += 1
        self._signal(hurry=True)
        return await done

    def _start_lingering(self) -> None:
        """A write that may linger is queued: if it is the first one waiting, its group is due
        ``linger`` seconds from now."""
        if not self._background and len(self._awaited) == self._urgent:
            self._due = asyncio.get_running_loop().time() + self._linger

    async def flush(self) -> None:
        """Wait until every write queued so far, in both lanes, is done."""
        self._check()
        await self._barrier()

    async def _barrier(self) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self._background:
            self._due = asyncio.get_running_loop().time()
        self._background.append(Job(nothing, (), done))
        self._barriers += 1
        self._signal(hurry=True)
        await done

    def _check(self) -> None:
        if self._wake is None or self._task is None or self._task.done():
            raise WriterNotRunning("The ChatBridge database writer is not running.")
        if self._closing:
            raise WriterNotRunning("The ChatBridge database writer is closing.")

    def _signal(self, *, hurry: bool) -> None:
        assert self._wake is not None and self._hurry is not None
        self._wake.set()
        if hurry:
            self._hurry.set()

    def _next_group(self) -> tuple[list[Job], int]:
        """The ordered writes, then as many background writes as fit: the group, and how many
        of it are ordered writes (at its head)."""
        awaited = [self._awaited.popleft() for _ in range(min(len(self._awaited), MAX_GROUP))]
        self._urgent -= sum(1 for job in awaited if job.urgent)
        room = MAX_GROUP - len(awaited)
        background = [self._background.popleft() for _ in range(min(len(self._background), room))]
        self._barriers -= sum(1 for job in background if job.done is not None)
        if self._awaited or self._background:  # what did not fit is due at once
            self._due = 0.0
        return awaited + background, len(awaited)

    async def _work(self) -> None:
        assert self._wake is not None and self._hurry is not None
        loop = asyncio.get_running_loop()
        shared = sync_to_async(run_group, thread_sensitive=True)
        while True:
            if not (self._awaited or self._background):
                self._wake.clear()
                await self._wake.wait()
            if not (self._urgent or self._barriers) and (wait := self._due - loop.time()) > 0:
                self._hurry.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), wait)
            group, awaited = self._next_group()
            try:
                if self._thread is None:
                    outcomes, values, outage = await shared(group)
                else:
                    run = loop.run_in_executor(self._thread, run_group, group)
                    outcomes, values, outage = await run
            except asyncio.CancelledError:  # closing: nobody may wait for ever
                for job in group:
                    if job.done is not None and not job.done.done():
                        job.done.set_exception(WriterNotRunning("The writer was stopped."))
                raise
            if outage:
                failed, errors = self._wait_for_database(group, outcomes, awaited, loop.time())
                self._settle(failed, errors, [None] * len(failed))
                await asyncio.sleep(self._backoff)  # the database is restarting: no busy loop
                self._backoff = min(self._backoff * 2, BACKOFF_MAX)
                continue
            if self._failing_since:
                logger.info("the database is back; the writes that waited for it are done")
                self._failing_since.clear()
                self._backoff = BACKOFF_FIRST
            self._settle(group, outcomes, values)

    def _wait_for_database(
        self, group: list[Job], outcomes: list[Outcome], awaited: int, now: float
    ) -> tuple[list[Job], list[Outcome]]:
        """``group`` failed because the database is away (nothing of it is on record, or all
        of it is: it runs again whole). Its writes that have not waited their time yet go back
        to the head of their lanes (its first ``awaited`` are awaited writes), in order; the
        others, and their errors, are returned."""
        keep_awaited, keep_background, failed = outlasted(
            group, outcomes, awaited, now, self._failing_since
        )
        self._awaited.extendleft(reversed(keep_awaited))
        self._background.extendleft(reversed(keep_background))
        self._urgent += sum(1 for job in keep_awaited if job.urgent)
        self._barriers += sum(1 for job in keep_background if job.done is not None)
        return [job for job, _ in failed], [outcome for _, outcome in failed]

    def _settle(self, group: list[Job], outcomes: list[Outcome], values: list[Any]) -> None:
        """Tell each write's waiter how it went (a background write's failure is logged)."""
        for job, outcome, value in zip(group, outcomes, values, strict=True):
            done = job.done
            if outcome is None:
                if done is not None and not done.done():
                    done.set_result(value)
            elif done is None:  # nobody waits for it: say so in the log
                logger.error(
                    "background write %s failed",
                    getattr(job.fn, "__name__", job.fn),
                    exc_info=(type(outcome), outcome, outcome.__traceback__),
                )
            elif not done.done():
                done.set_exception(outcome)


def _report_failure(done: asyncio.Future[Any]) -> None:
    """A ``write_soon`` that failed is logged (its caller may never look at its future)."""
    if not done.cancelled() and (error := done.exception()) is not None:
        logger.error("ordered write failed", exc_info=(type(error), error, error.__traceback__))


_active: Writer | None = None


def _writer() -> Writer:
    if _active is None:
        raise WriterNotRunning(
            "No ChatBridge runtime is running, so nothing can be written: start one "
            "(the ASGI lifespan, daphne, or ChatBridgeRuntime.start() in a test)."
        )
    return _active


def write_later(fn: Callable[..., Any], *args: Any) -> None:
    """Queue ``fn(*args)`` on the running runtime's writer; return at once."""
    _writer().later(fn, *args)


async def write_now(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` in the next group (after earlier ordered writes); wait for it, and
    hand back what it returned (a read that must see the writes queued before it)."""
    return await _writer().now(fn, *args)


def write_soon(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """Queue ``fn(*args)`` in the ordered lane; return at once. The next ``write_now`` carries
    it (in order, in one transaction); the future of its outcome."""
    return _writer().soon(fn, *args)


async def flush() -> None:
    """Wait until every write queued so far, in both lanes, is done."""
    await _writer().flush()


V = TypeVar("V")


def _newer(taken: V, newer: V) -> V:
    return newer


class Latest(Generic[V]):
    """What waits to be written, per key: the latest of a burst of changes (a call's status, a
    turn's phase, a call's log lines and progress), so that the burst is one write. The event
    loop keeps values, the writer's thread takes them; every access holds the lock. A write that
    took a value and runs again finds it again, merged with what came meanwhile. Each belongs
    to the recorder or store that writes it (the runtime's): a runtime started after another in
    the same process starts with nothing waiting.

    ``restore(taken, newer)``: what waits after a write that took ``taken`` must run again
    while ``newer`` came (by default the newer one; the log lines of a call keep both)."""

    def __init__(self, restore: Callable[[V, V], V] = _newer) -> None:
        self._values: dict[str, V] = {}
        self._lock = threading.Lock()
        self._restore = restore

    def keep(self, key: str, value: V) -> bool:
        """``value`` waits for ``key`` (replacing one that waited); True if a write must be
        queued (none waited)."""
        with self._lock:
            queued = key in self._values
            self._values[key] = value
        return not queued

    def update(self, key: str, change: Callable[[V | None], V]) -> bool:
        """What waits for ``key`` becomes ``change(it)``; True if a write must be queued."""
        with self._lock:
            waiting = self._values.get(key)
            self._values[key] = change(waiting)
        return waiting is None

    def take(self, key: str, only: Callable[[V], bool] | None = None) -> V | None:
        """On the writer's thread: the value waiting for ``key``, no longer waiting (None if
        none waits, or ``only`` says this write does not take it)."""
        with self._lock:
            value = self._values.get(key)
            if value is None or (only is not None and not only(value)):
                return None
            del self._values[key]
        undo_on_retry(lambda: self._put_back(key, value))
        return value

    def drop(self, key: str) -> None:
        """Nothing waits for ``key`` any more: what is written now supersedes it."""
        with self._lock:
            self._values.pop(key, None)

    def _put_back(self, key: str, value: V) -> None:
        with self._lock:
            newer = self._values.get(key)
            self._values[key] = value if newer is None else self._restore(value, newer)
