"""How a session's events reach whoever drives it (``PluginSession``'s part, as
``SessionQuestions`` and ``SessionStops`` are): events queue until ``next_event`` takes them,
and a driver waiting for one sleeps on a future of its own until the session wakes it.

A suspended session holds neither list while nothing is queued or waited for: thousands of
them wait on questions at once (``bench/memory.py``).
"""

from __future__ import annotations

import asyncio

from chatbridge.calls.events import SessionEvent

__all__ = ["SessionEvents"]


class SessionEvents:
    """A session's queued events and its waiters (see the module docstring)."""

    # The session's state (``PluginSession.__init__`` sets it).
    _events: list[SessionEvent] | None  # not taken yet
    _wakeups: list[asyncio.Future[None]] | None  # a future for each waiting driver
    _terminal: SessionEvent | None  # how it ended, once it has

    async def wait_finished(self) -> SessionEvent:
        """Wait until the session ends (without consuming events); return its terminal event."""
        while self._terminal is None:
            await self._wait()
        return self._terminal

    async def next_event(self) -> SessionEvent:
        """The next event; once the session has ended, its terminal event again and again."""
        while not self._events:
            if self._terminal is not None:
                return self._terminal
            await self._wait()
        events = self._events
        assert events is not None
        event = events.pop(0)
        if not events:
            self._events = None
        return event

    async def _wait(self) -> None:
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

    def _wake(self) -> None:
        wakeups, self._wakeups = self._wakeups, None
        for wakeup in wakeups or ():
            if not wakeup.done():
                wakeup.set_result(None)

    def _queue(self, event: SessionEvent) -> None:
        if self._events is None:
            self._events = [event]
        else:
            self._events.append(event)
