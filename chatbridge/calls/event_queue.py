"""How a session's events reach whoever drives it: events queue until ``next`` takes them,
and a driver waiting for one sleeps on a future of its own until the queue wakes it.

A suspended session's queue holds neither list while nothing is queued or waited for:
thousands of them wait on questions at once (``bench/memory.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from chatbridge.calls.events import SessionEvent

__all__ = ["EventQueue"]


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
