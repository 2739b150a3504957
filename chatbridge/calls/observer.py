"""Watching sessions from outside: what a recorder (the admin's tables) is told, and when.

Every method is awaited at the point the session reaches it, in order, so a recorder that
writes each call sees a complete and ordered history. A failing observer is logged and never
breaks the tool: observing is best effort. What must not be lost, the journal, goes through
the session's ``JournalStore`` (calls/journal.py) instead, whose failure stops the call.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from chatbridge.calls.events import LogEvent, ProgressEvent, SessionEvent
    from chatbridge.calls.journal import EntryKind, JournalEntry
    from chatbridge.calls.sessions import PluginSession

__all__ = ["SessionObserver", "observe"]

logger = logging.getLogger("chatbridge.observer")


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
