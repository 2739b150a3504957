"""The process's database writer: writes leave the critical path, in order, in groups.

A ``Writer`` is owned by the process's runtime, which starts it and closes it (closing waits
for every queued write). On PostgreSQL writes run on the writer's own thread and connection, so
they never wait behind the reads of sockets and views. On SQLite they run on the thread (and so
the connection) every other database call of the process uses: SQLite has one writer at a time,
and two connections of one process would only wait for each other's locks (its busy handler
sleeps a millisecond and more per retry). Writes run as groups, one transaction per
group (a group commit: one thread hop and one commit for many writes), each write in its own
savepoint, so a write that fails is rolled back and reported alone while its group commits.

Two lanes, each in order:

- **awaited writes** (``write_now``: the journal entry that must exist before a tool acts on an
  answer, a call's row, a message) run in the next group, ahead of background writes queued
  earlier, which ride along in the same transaction (their commit is paid already); a failed
  one raises in the caller. What may be overtaken is written so that the
  order does not matter (status snapshots are superseded by a call's end, requests never
  overwrite an answered entry, phases skip ended calls);
- **background writes** (``write_later``: status, phases, requests, log lines) linger up to
  ``LINGER`` seconds so that more join their group: under load one commit carries the writes of
  many calls, and they stay off the thread while replies are being sent.

``flush`` waits until every write queued before it, in both lanes, is done.
``write_later``/``write_now``/``flush`` reach the writer of the running runtime.

While the database is away (a restart cuts connections off, new ones are refused) a group that
failed for that reason runs again, whole and in order, until the database is back or its writes
have waited ``CHATBRIDGE_DB_RETRY_SECONDS`` (then they fail as before). So every write must be
idempotent: a group whose commit was cut off may have committed. A write that takes data kept
in memory (the coalesced status, phase and log writes) says with ``undo_on_retry`` how to put
it back for its next run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections, transaction

from chatbridge.records.outage import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    DatabaseUnavailable,
    connection_broken,
    retry_seconds,
)

__all__ = [
    "LINGER",
    "MAX_GROUP",
    "Writer",
    "WriterNotRunning",
    "flush",
    "undo_on_retry",
    "write_later",
    "write_now",
]

logger = logging.getLogger("chatbridge.writer")

MAX_GROUP = 256  # writes committed together at most
LINGER = 0.1  # seconds a group of background writes gathers more

_Job = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[None] | None"]
_Outcome = BaseException | None
_Undo = Callable[[], None]


class WriterNotRunning(RuntimeError):
    """A write was asked for while no runtime's writer runs (start the runtime first)."""


class Writer:
    """The two lanes of ORM writes, the task that hands them over in groups, and the thread
    (with its own database connection) that runs them."""

    def __init__(self, *, linger: float = LINGER) -> None:
        self._linger = linger  # how long a background group gathers more (``LINGER``)
        self._awaited: deque[_Job] = deque()
        self._background: deque[_Job] = deque()  # flush barriers too (they carry a future)
        self._barriers = 0  # flush barriers in ``_background``: no lingering while any wait
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
        if not self._background:
            self._due = asyncio.get_running_loop().time() + self._linger
        self._background.append((fn, args, None))
        self._signal(hurry=False)

    async def now(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the next group (after the awaited writes queued before it) and
        wait until it is done."""
        self._check()
        done = asyncio.get_running_loop().create_future()
        self._awaited.append((fn, args, done))
        self._signal(hurry=True)
        await done

    async def flush(self) -> None:
        """Wait until every write queued so far, in both lanes, is done."""
        self._check()
        await self._barrier()

    async def _barrier(self) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self._background:
            self._due = asyncio.get_running_loop().time()
        self._background.append((_nothing, (), done))
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

    def _next_group(self) -> tuple[list[_Job], int]:
        """The awaited writes, then as many background writes as fit: the group, and how many
        of it are awaited writes (at its head)."""
        awaited = [self._awaited.popleft() for _ in range(min(len(self._awaited), MAX_GROUP))]
        room = MAX_GROUP - len(awaited)
        background = [self._background.popleft() for _ in range(min(len(self._background), room))]
        self._barriers -= sum(1 for _, _, done in background if done is not None)
        if self._background:  # what did not fit is due at once
            self._due = 0.0
        return awaited + background, len(awaited)

    async def _work(self) -> None:
        assert self._wake is not None and self._hurry is not None
        loop = asyncio.get_running_loop()
        shared = sync_to_async(_run_group, thread_sensitive=True)
        while True:
            if not (self._awaited or self._background):
                self._wake.clear()
                await self._wake.wait()
            if not (self._awaited or self._barriers) and (wait := self._due - loop.time()) > 0:
                self._hurry.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), wait)
            group, awaited = self._next_group()
            try:
                if self._thread is None:
                    outcomes, outage = await shared(group)
                else:
                    run = loop.run_in_executor(self._thread, _run_group, group)
                    outcomes, outage = await run
            except asyncio.CancelledError:  # closing: nobody may wait for ever
                for _, _, done in group:
                    if done is not None and not done.done():
                        done.set_exception(WriterNotRunning("The writer was stopped."))
                raise
            if outage:
                self._settle(*self._wait_for_database(group, outcomes, awaited, loop.time()))
                await asyncio.sleep(self._backoff)  # the database is restarting: no busy loop
                self._backoff = min(self._backoff * 2, BACKOFF_MAX)
                continue
            if self._failing_since:
                logger.info("the database is back; the writes that waited for it are done")
                self._failing_since.clear()
                self._backoff = BACKOFF_FIRST
            self._settle(group, outcomes)

    def _wait_for_database(
        self, group: list[_Job], outcomes: list[_Outcome], awaited: int, now: float
    ) -> tuple[list[_Job], list[_Outcome]]:
        """``group`` failed because the database is away (nothing of it is on record, or all
        of it is: it runs again whole). Its writes that have not waited their time yet go back
        to the head of their lanes (its first ``awaited`` are awaited writes), in order; the
        others, and their errors, are returned."""
        if not self._failing_since:
            error = next((o for o in outcomes if o is not None), None)
            logger.warning(
                "the database is unavailable (%s: %s); writes wait for it up to %.0f s",
                type(error).__name__,
                error,
                retry_seconds(),
            )
        patience = retry_seconds()
        keep: tuple[list[_Job], list[_Job]] = ([], [])  # awaited, background
        failed: list[tuple[_Job, _Outcome]] = []
        for n, (job, outcome) in enumerate(zip(group, outcomes, strict=True)):
            if now - self._failing_since.setdefault(id(job), now) < patience:
                keep[n >= awaited].append(job)
            else:
                self._failing_since.pop(id(job), None)
                gone = DatabaseUnavailable(str(outcome or "the database is unavailable"))
                gone.__cause__ = outcome
                failed.append((job, gone))
        self._awaited.extendleft(reversed(keep[0]))
        self._background.extendleft(reversed(keep[1]))
        self._barriers += sum(1 for _, _, done in keep[1] if done is not None)
        return [job for job, _ in failed], [outcome for _, outcome in failed]

    def _settle(self, group: list[_Job], outcomes: list[_Outcome]) -> None:
        """Tell each write's waiter how it went (a background write's failure is logged)."""
        for (fn, _, done), outcome in zip(group, outcomes, strict=True):
            if outcome is None:
                if done is not None and not done.done():
                    done.set_result(None)
            elif done is None:  # nobody waits for it: say so in the log
                logger.error(
                    "background write %s failed",
                    getattr(fn, "__name__", fn),
                    exc_info=(type(outcome), outcome, outcome.__traceback__),
                )
            elif not done.done():
                done.set_exception(outcome)


def _run_group(group: list[_Job]) -> tuple[list[_Outcome], bool]:
    """On the database thread: every write of ``group`` in one transaction.

    An awaited write runs in a savepoint of its own: when it fails, only it is rolled back and
    its caller gets the error. So does every write on PostgreSQL, where a failed statement
    spoils the rest of the transaction. Background writes on SQLite go without (two statements
    saved per write): SQLite undoes a failed statement alone and the transaction goes on, so a
    failed background write is reported and the group commits; what that write had changed
    before its failing statement stays (each of them writes one row, or rows that need not
    change together). If the transaction itself fails (the
    connection broke), every write of the group that had not failed already fails with that
    error, and the connection is dropped so the next group opens a new one.

    The second value says whether the group failed because the database went away (its
    connection is broken, or none could be had): then it is to run again, whole, and what its
    writes took from memory has been put back (``undo_on_retry``)."""
    outcomes: list[_Outcome] = [None] * len(group)
    if all(fn is _nothing for fn, _, _ in group):  # only flush barriers: nothing to write
        return outcomes, False
    if _stale():
        close_old_connections()
    every_one = connections["default"].vendor != "sqlite"
    undo: list[_Undo] = []
    _undo.callbacks = undo
    raw: Any = None  # the connection the group started on
    outer_failed = False
    try:
        with transaction.atomic():
            raw = connections["default"].connection
            if len(group) == 1:  # its own transaction isolates it
                group[0][0](*group[0][1])
            else:
                for n, (fn, args, done) in enumerate(group):
                    try:
                        if done is not None or every_one:
                            with transaction.atomic():
                                fn(*args)
                        else:
                            fn(*args)
                    except Exception as exc:
                        outcomes[n] = exc
                        if done is None and not every_one:  # SQLite undid the statement alone
                            transaction.set_rollback(False)
    except Exception as exc:
        outcomes = [outcome or exc for outcome in outcomes]
        outer_failed = True
    finally:
        _undo.callbacks = None
    if all(outcome is None for outcome in outcomes):
        return outcomes, False
    # Gone away: none could be had, the broken one was dropped (and another taken) on the way
    # out of the transaction, or the one kept does not work.
    connection = connections["default"]
    if raw is None or connection.connection is not raw or connection_broken():
        for callback in reversed(undo):
            callback()
        return outcomes, True
    if outer_failed and (len(group) > 1 or connection.errors_occurred):
        with contextlib.suppress(Exception):
            connection.close()
    return outcomes, False


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


async def write_now(fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` in the next group (after earlier awaited writes); wait for it."""
    await _writer().now(fn, *args)


async def flush() -> None:
    """Wait until every write queued so far, in both lanes, is done."""
    await _writer().flush()


def _nothing() -> None:
    return None
