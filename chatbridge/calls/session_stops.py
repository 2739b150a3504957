"""Stopping a tool call: an abort (by its user, an operator, the server, a client), what a
call that committed decides instead (``chatbridge.calls.commitment``), and parking it when the
process goes away.

``SessionStops`` is the session's collaborator for this (``chatbridge.calls.sessions``): it
owns whether the call was parked and who stopped it; the session asks it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from chatbridge.author.exceptions import ClaimLost, JournalWriteFailed, SessionAborted
from chatbridge.calls.commitment import AbortDecision, CommitmentGuard, CommitmentNote
from chatbridge.calls.compensation import compensate
from chatbridge.calls.context import CallState
from chatbridge.calls.events import AbortedEvent, observe

if TYPE_CHECKING:
    from chatbridge.calls.sessions import PluginSession

__all__ = ["PARKED", "SessionStops"]

logger = logging.getLogger("chatbridge.sessions")

PARKED = "parked: the server is shutting down"


class SessionStops:
    """How a session stops (see the module docstring)."""

    __slots__ = ("_guard", "_session", "_state", "aborted_by", "parked")

    def __init__(self, session: PluginSession, guard: CommitmentGuard, state: CallState) -> None:
        self._session, self._guard, self._state = session, guard, state
        self.aborted_by: str | None = None  # who stopped the call, for the record
        self.parked = False  # stopped here without an end on record (resumed elsewhere)

    @property
    def abort_requested(self) -> tuple[str, str | None] | None:
        """A request to stop made after the call committed: (reason, by)."""
        return self._guard.abort if self._guard.committed else None

    @property
    def stopping(self) -> bool:
        """Stopped by ``abort`` before it committed, and not ended yet: its end is decided
        (aborted), the tool is unwinding."""
        return (
            self._state.aborted is not None
            and not self._session.finished
            and not self._guard.committed
        )

    def abort_decision(self) -> AbortDecision:
        """What ``abort()`` would do now (nothing changes)."""
        if self._session.over:
            return "ended"
        if not self._guard.committed:
            return "aborted"
        return self._guard.decision(self._asking())

    def _asking(self) -> bool:
        return self._session.question is not None

    async def abort(
        self, reason: str = "aborted", *, by: str | None = None, grace: float = 5.0
    ) -> AbortDecision:
        """Stop the tool: it sees ``SessionAborted`` at its await point, and wait for its end.
        Idempotent.

        ``by`` names who aborted (a user, an operator) for the record. A call that committed
        (``.commits()``: its answer is on record) is not stopped where it stands: it finishes,
        or is stopped at its open question to run its compensation (see
        ``chatbridge.calls.commitment``); the decision is returned for the one who asked.
        """
        decision = await self.stop(reason, by=by)
        if decision != "aborted":
            return decision
        task = self._session.task
        if task is None or task is asyncio.current_task():
            return decision  # a tool aborting itself: it unwinds by raising SessionAborted
        done, _ = await asyncio.wait({task}, timeout=grace)
        if not done and not self._guard.committed:  # it caught SessionAborted: stop it hard
            logger.warning(
                "session %s ignored abort for %.1fs; cancelling", self._session.id, grace
            )
            task.cancel(reason)
            await asyncio.wait({task})
        return decision

    async def stop(self, reason: str = "aborted", *, by: str | None = None) -> AbortDecision:
        """``abort`` without waiting for the tool to end: what it decided, at once."""
        if self._session.over:
            return "ended"
        if self._state.aborted is None and not self._guard.committed:
            await self._session.questions.page_answered()
        if self._session.finished:  # it ended meanwhile (paid on its page, then finished)
            return "ended"
        if self._guard.committed:
            return await self.abort_committed(reason, by)
        if self._state.aborted is None:
            self.aborted_by = by
            self._state.aborted = SessionAborted(self._session.id, reason)
            question = self._session.question
            task = self._session.task
            if question is not None:
                question.fail(self._state.aborted)
            elif task is not None:
                task.cancel(reason)
        if self._session.task is None:
            await self._session.end_on_record(AbortedEvent(self._session.id, reason), "aborted")
        return "aborted"

    async def abort_committed(self, reason: str, by: str | None) -> AbortDecision:
        """An abort after the commitment: noted (and on record, for a worker resuming the
        call); the tool goes on, or is stopped at its open question to compensate."""
        decision = self._guard.decision(self._asking())
        first = self._guard.abort is None
        self._guard.request_abort(reason, by)
        if first:
            logger.info("session %s committed: abort (%s) %s", self._session.id, reason, decision)
            session = self._session
            await observe(session.observer, lambda o: o.abort_deferred(session))
        question = self._session.question
        if decision == "compensating" and question is not None:
            self.stop_for_compensation()
            question.fail(self._state.aborted or SessionAborted(self._session.id, reason))
        return decision

    def stop_for_compensation(self) -> SessionAborted:
        """Mark the call stopped by its deferred abort; the exception the tool sees."""
        assert self._guard.abort is not None
        reason, by = self._guard.abort
        if self._state.aborted is None:
            self.aborted_by = by
            self._state.aborted = SessionAborted(self._session.id, reason)
        return self._state.aborted

    async def park(self) -> None:
        """Stop the task without recording an end: the process is going away and the call stays
        suspended on record (its journal is durable), to be resumed by replay elsewhere."""
        session = self._session
        if session.finished:
            return
        task = session.task
        if session.over:  # its end is being put on record: let it be
            if task is not None and task is not asyncio.current_task():
                await asyncio.wait({task})
            return
        self.parked = True
        if task is not None and task is not asyncio.current_task():
            task.cancel("parked")
            await asyncio.wait({task})
        if not session.finished:
            session.announce_end(AbortedEvent(session.id, PARKED), "aborted")

    async def compensated(self) -> CommitmentNote | None:
        """A committed call that cannot finish runs its compensation; None if not committed."""
        if not self._guard.committed:
            return None
        return await compensate(self._state, self._guard)

    def hand_over(self, cause: BaseException) -> bool:
        """A call whose journal cannot be written here (the database is away, or another
        worker took the call) does not end if it committed, or if a step ran whose result
        could not be recorded (its effect may stand): it stays on record and is finished by
        whichever worker resumes it (this one, once the database is back). True if so (it
        ended here as parked)."""
        if not isinstance(cause, JournalWriteFailed | ClaimLost):
            return False
        if not (self._guard.committed or self._state.unsettled):
            return False
        session = self._session
        logger.warning("committed call %s handed over: %s", session.id, cause)
        self.parked = True
        session.announce_end(AbortedEvent(session.id, PARKED), "aborted")
        return True
