"""Calls nobody continues end: one timer per call, re-armed on each round or update.

A 2026-07-28 round trip and a task both leave a live session waiting for a client that may
never come back; each arms a timer when it hands the client a question and disarms it while a
request is working on the call. When the timer fires, the session is aborted in a task of its
own (nothing cancels it), with the reason the caller gives. The timers live in this process:
a call parked by a worker that is gone is ended by the sweep of ``mcp/parked.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from chatbridge.calls.sessions import PluginSession

__all__ = ["Expiries"]

Expire = Callable[[PluginSession], Coroutine[Any, Any, None]]


class Expiries:
    """Timers that run ``expire(session)`` ``ttl`` seconds after the last ``arm``."""

    def __init__(self, ttl: float, expire: Expire) -> None:
        self.ttl = ttl
        self._expire = expire
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._running: set[asyncio.Task[None]] = set()

    def arm(self, session: PluginSession) -> None:
        self.disarm(session.id)
        loop = asyncio.get_running_loop()
        self._timers[session.id] = loop.call_later(self.ttl, self._fire, session)

    def disarm(self, call_id: str) -> None:
        timer = self._timers.pop(call_id, None)
        if timer is not None:
            timer.cancel()

    def _fire(self, session: PluginSession) -> None:
        self._timers.pop(session.id, None)
        task = asyncio.get_running_loop().create_task(self._expire(session))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
