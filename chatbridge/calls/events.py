"""A session's events: the events a ``PluginSession`` emits, read with ``await
session.next_event()``; the ``EventQueue`` that takes them to whoever drives the session; and
the ``SessionObserver`` watching sessions from outside.

The queue: events wait until ``next`` takes them, and a driver waiting for one sleeps on a
future of its own until the queue wakes it. A suspended session's queue holds neither list
while nothing is queued or waited for: thousands of them wait on questions at once
(``bench/memory.py``).

The observer (a recorder: the admin's tables) is told of a session's life as it happens. Every
method is awaited at the point the session reaches it, in order, so a recorder that writes each
call sees a complete and ordered history. A failing observer is logged and never breaks the
tool: observing is best effort. What must not be lost, the journal, goes through the session's
``JournalStore`` (calls/journal.py) instead, whose failure stops the call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from chatbridge.author.elicit import ElicitRequest
from chatbridge.calls.commitment import CommitmentNote

if TYPE_CHECKING:
    from chatbridge.calls.journal import EntryKind, JournalEntry
    from chatbridge.calls.sessions import PluginSession

__all__ = [
    "AbortedEvent",
    "CompletedEvent",
    "ElicitEvent",
    "EventQueue",
    "FailedEvent",
    "LogEvent",
    "ProgressEvent",
    "SessionEvent",
    "SessionObserver",
    "TERMINAL_EVENTS",
    "observe",
]

logger = logging.getLogger("chatbridge.observer")


@dataclass(frozen=True)
class ElicitEvent:
    """The tool asked a question and waits for ``respond_to_elicit``."""

    session_id: str
    request: ElicitRequest
    type: Literal["elicit"] = "elicit"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "session_id": self.session_id, **self.request.to_dict()}


@dataclass(frozen=True)
class LogEvent:
    """A log line from ``ctx.log``."""

    session_id: str
    level: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    type: Literal["log"] = "log"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "session_id": self.session_id,
            "level": self.level,
            "message": self.message,
            "data": self.data,
        }


@dataclass(frozen=True)
class ProgressEvent:
    """A progress note from ``ctx.notify``."""

    session_id: str
    message: str
    progress: float | None = None
    total: float | None = None
    type: Literal["progress"] = "progress"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "session_id": self.session_id,
            "message": self.message,
            "progress": self.progress,
            "total": self.total,
        }


@dataclass(frozen=True)
class CompletedEvent:
    """The tool returned; ``result`` is its JSON-serialisable value."""

    session_id: str
    result: Any
    type: Literal["completed"] = "completed"
    commitment: CommitmentNote | None = None  # committed, finished despite a request to stop

    def to_dict(self) -> dict[str, Any]:
        data = {"type": self.type, "session_id": self.session_id, "result": self.result}
        return _with_commitment(data, self.commitment)


@dataclass(frozen=True)
class FailedEvent:
    """The tool raised; ``error`` is ``"ExceptionType: message"``."""

    session_id: str
    error: str
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    type: Literal["failed"] = "failed"
    commitment: CommitmentNote | None = None  # committed: what its compensation did

    def to_dict(self) -> dict[str, Any]:
        data = {"type": self.type, "session_id": self.session_id, "error": self.error}
        return _with_commitment(data, self.commitment)


@dataclass(frozen=True)
class AbortedEvent:
    """The session was aborted (by a user, an operator or the idle timeout)."""

    session_id: str
    reason: str
    type: Literal["aborted"] = "aborted"
    commitment: CommitmentNote | None = None  # committed: stopped at a question, compensated

    def to_dict(self) -> dict[str, Any]:
        data = {"type": self.type, "session_id": self.session_id, "reason": self.reason}
        return _with_commitment(data, self.commitment)


def _with_commitment(data: dict[str, Any], note: CommitmentNote | None) -> dict[str, Any]:
    if note is not None:
        data["commitment"] = note.to_dict()
    return data


SessionEvent: TypeAlias = (
    ElicitEvent | LogEvent | ProgressEvent | CompletedEvent | FailedEvent | AbortedEvent
)
TERMINAL_EVENTS = frozenset({"completed", "failed", "aborted"})


# -- the queue of a session's events ---------------------------------------------------------


class EventQueue:
    """A session's events not taken yet, its waiting drivers, and how it ended."""

    __slots__ = ("_events", "_wakeups", "terminal")

    def __init__(self) -> None:
        self._events: list[SessionEvent] | None = None  # each a list only while it holds one
        self._wakeups: list[asyncio.Future[None]] | None = None  # a future per waiting driver
        self.terminal: SessionEvent | None = None  # how the session ended, once it has

    def __iter__(self) -> Iterator[SessionEvent]:
        """The events not taken yet (nothing is taken)."""
        return iter(self._events or ())

    async def wait_finished(self) -> SessionEvent:
        """Wait until the session ends (without taking events); its terminal event."""
        while self.terminal is None:
            await self.wait()
        return self.terminal

    async def next(self) -> SessionEvent:
        """The next event; once the session has ended, its terminal event again and again."""
        while not self._events:
            if self.terminal is not None:
                return self.terminal
            await self.wait()
        events = self._events
        event = events.pop(0)
        if not events:
            self._events = None
        return event

    async def wait(self) -> None:
        """Sleep until the next event or the end."""
        wakeup: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._wakeups is None:
            self._wakeups = []
        self._wakeups.append(wakeup)
        try:
            await wakeup
        finally:
            if self._wakeups is not None and wakeup in self._wakeups:
                self._wakeups.remove(wakeup)

    def put(self, event: SessionEvent) -> None:
        """Queue ``event`` and wake the waiting drivers."""
        if self._events is None:
            self._events = [event]
        else:
            self._events.append(event)
        self.wake()

    def end(self, event: SessionEvent) -> None:
        """The session ended with ``event``: queued, kept as its terminal event, drivers woken."""
        self.terminal = event
        self.put(event)

    def wake(self) -> None:
        wakeups, self._wakeups = self._wakeups, None
        for wakeup in wakeups or ():
            if not wakeup.done():
                wakeup.set_result(None)


# -- observers ---------------------------------------------------------------------------------


class SessionObserver(Protocol):
    """Receives a session's lifecycle, status changes and journal as they happen."""

    async def session_started(self, session: PluginSession) -> None:
        """Before the tool runs."""

    async def status_changed(self, session: PluginSession) -> None:
        """``session.status`` or ``session.pending`` changed."""

    async def capability_requested(
        self, session: PluginSession, seq: int, kind: EntryKind, key: str, request: dict[str, Any]
    ) -> None:
        """A live ``elicit``/``sample``/``step`` call starts (replayed ones are not reported)."""

    async def capability_recorded(self, session: PluginSession, entry: JournalEntry) -> None:
        """Its result was appended to the journal (and the journal store accepted it)."""

    async def answer_rejected(
        self,
        session: PluginSession,
        elicit_id: str,
        data: dict[str, Any],
        errors: dict[str, list[str]],
    ) -> None:
        """An answer to the pending question was refused; the question stays open."""

    async def log_emitted(self, session: PluginSession, event: LogEvent) -> None:
        """A live call logged a line (``ctx.log``; a replay logs nothing)."""

    async def progress_emitted(self, session: PluginSession, event: ProgressEvent) -> None:
        """A live call reported progress (``ctx.notify``)."""

    async def abort_deferred(self, session: PluginSession) -> None:
        """A committed call was asked to stop (``session.abort_requested``): it goes on to
        finish, or compensates; a worker resuming it must know the request."""

    async def session_ended(self, session: PluginSession, event: SessionEvent) -> None:
        """The session completed, failed or was aborted."""


async def observe(
    observer: SessionObserver | None, call: Callable[[SessionObserver], Awaitable[None]]
) -> None:
    """``await call(observer)`` if there is an observer, e.g. ``lambda o:
    o.status_changed(session)`` (typed: mypy checks the method and its arguments); a failure is
    logged, never raised."""
    if observer is None:
        return
    try:
        await call(observer)
    except Exception:  # a broken recorder must not break the tool it records
        logger.exception("session observer %s failed", type(observer).__name__)
