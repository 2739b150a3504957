"""``SessionManager``: the process-wide registry of live tool calls (DESIGN §1, §2).

It creates sessions (resuming them by replay when given a journal), finds, aborts and lists
them, expires questions nobody answers, and parks every session when the process shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from chatbridge.author.exceptions import DuplicateSession, SessionNotFound
from chatbridge.author.sampling import LiteLLMSampler, Sampler
from chatbridge.author.tools import McpTool
from chatbridge.calls.events import SessionObserver, observe
from chatbridge.calls.journal import JournalEntry, JournalStore, MemoryJournalStore
from chatbridge.calls.links import UrlLinks
from chatbridge.calls.questions import MAX_REFUSED_ANSWERS
from chatbridge.calls.sessions import Clock, PluginSession, SessionInfo

__all__ = ["SessionManager"]


class SessionManager:
    """Process-wide registry of live sessions: create, get, abort, list, expire idle ones.

    Args:
        sampler: completes ``ctx.sample`` calls; default litellm with ``CHATBRIDGE_MODEL``.
        journal_store: makes each journal entry durable before the tool goes on; its failure
            stops the call (default: memory only).
        idle_timeout: seconds a session may wait for an answer before it is aborted
            (``None`` disables expiry).
        url_links: hands out the links of URL questions (``ctx.elicit_url``); without it
            such a question stops the call with ``UrlQuestionsUnavailable``.
        max_refused: refused answers a question takes before it closes and its call fails
            with ``TooManyRefusedAnswers``, on every transport (``None`` or 0: no limit).
    """

    def __init__(
        self,
        *,
        sampler: Sampler | None = None,
        idle_timeout: float | None = 3600.0,
        clock: Clock = time.monotonic,
        observer: SessionObserver | None = None,
        journal_store: JournalStore | None = None,
        url_links: UrlLinks | None = None,
        max_refused: int | None = MAX_REFUSED_ANSWERS,
    ) -> None:
        if idle_timeout is not None and idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive or None, got {idle_timeout!r}")
        if max_refused is not None and max_refused < 0:
            raise ValueError(f"max_refused must be 0 or more, or None, got {max_refused!r}")
        self.max_refused = max_refused or None
        self.sampler: Sampler = sampler or LiteLLMSampler()
        self.idle_timeout = idle_timeout
        self.observer = observer
        self.journal_store: JournalStore = journal_store or MemoryJournalStore()
        self.url_links = url_links
        self._clock = clock
        self._sessions: dict[str, PluginSession] = {}
        self._on_finish = self._forget  # one bound method for every session, not one each
        self._reaper: asyncio.Task[None] | None = None
        # Ended here as parked, oldest first, until resumed here (see ``handed_over``).
        self._parked: dict[str, None] = {}

    async def create(
        self,
        tool: McpTool[Any, Any],
        params: Mapping[str, Any] | BaseModel,
        *,
        call_id: str,
        journal: Iterable[JournalEntry | Mapping[str, Any]] | None = None,
        meta: Mapping[str, str] | None = None,
        abort_requested: tuple[str, str | None] | None = None,
        refused_on_record: tuple[str, int] | None = None,
    ) -> PluginSession:
        """Validate ``params`` and start the tool; with ``journal``, resume it by replay.

        ``meta`` (for example the conversation id) travels with the session to observers;
        ``abort_requested``: a request to stop the call made after it committed (on record);
        ``refused_on_record``: the open question's id and its refused answers on record (the
        resumed call's question keeps counting from there).
        """
        if not isinstance(call_id, str) or not call_id.strip():
            raise ValueError(f"call_id must be a non-empty string, got {call_id!r}")
        if call_id in self._sessions:
            raise DuplicateSession(call_id)
        validated = tool.validate_params(params)
        session = PluginSession(
            tool,
            validated,
            call_id,
            journal=journal or (),
            sampler=self.sampler,
            clock=self._clock,
            on_finish=self._on_finish,
            observer=self.observer,
            journal_store=self.journal_store,
            meta=meta,
            url_links=self.url_links,
            abort_requested=abort_requested,
            refused_on_record=refused_on_record,
            max_refused=self.max_refused,
        )
        self._sessions[call_id] = session
        self._parked.pop(call_id, None)  # resumed here: no longer handed over
        await observe(self.observer, lambda o: o.session_started(session))
        session.start()
        self._ensure_reaper()
        return session

    def get(self, session_id: str) -> PluginSession | None:
        """The live session with this id, or ``None``."""
        return self._sessions.get(session_id)

    def require(self, session_id: str) -> PluginSession:
        """The live session with this id, or ``SessionNotFound``."""
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFound(session_id)
        return session

    async def abort(
        self, session_id: str, reason: str = "aborted", *, by: str | None = None
    ) -> None:
        """Abort a live session; ``SessionNotFound`` if there is none."""
        await self.require(session_id).abort(reason, by=by)

    def sessions(self) -> list[PluginSession]:
        """Every live session (a copy of the list: sessions may end meanwhile)."""
        return list(self._sessions.values())

    def list_active(self) -> list[SessionInfo]:
        """Snapshots of every live session, oldest first."""
        return sorted((s.info() for s in self._sessions.values()), key=lambda i: i.created_at)

    def __len__(self) -> int:
        return len(self._sessions)

    async def reap_idle(self) -> list[str]:
        """Expire questions unanswered longer than ``idle_timeout`` (the tool gets ``Cancel``);
        return the ids of the sessions concerned."""
        if self.idle_timeout is None:
            return []
        limit = self.idle_timeout
        idle = [s for s in self._sessions.values() if s.idle_seconds() > limit]
        for session in idle:
            await session.expire()
        return [s.id for s in idle]

    def start(self) -> None:
        """Start expiring unanswered questions (``idle_timeout``) on the running loop.

        A manager used on its own may skip this: its first session starts the expiry.
        """
        self._ensure_reaper()

    async def park(self, grace: float = 2.0) -> list[str]:
        """Stop every session without recording an end (process shutdown); return their ids.

        Sessions working between questions get up to ``grace`` seconds to reach a question or
        finish first, so a step under way is not cut off; then all are parked. A parked call
        stays suspended on record and is resumed by replay after a restart.
        """
        busy = [s for s in self._sessions.values() if s.status != "awaiting_elicit"]
        if busy and grace > 0:
            waits = [asyncio.create_task(s.settled()) for s in busy]
            await asyncio.wait(waits, timeout=grace)
            for wait in waits:
                wait.cancel()
        parked = list(self._sessions.values())
        for session in parked:
            await session.park()
        await self._stop_reaper()
        return [s.id for s in parked]

    async def shutdown(self, reason: str = "server shutting down") -> None:
        """Abort every live session and stop the idle reaper. A committed call that will not
        stop (see ``PluginSession.abort``) is parked: it stays on record, committed."""
        for session in list(self._sessions.values()):
            if await session.abort(reason) != "aborted":
                await session.park()
        await self._stop_reaper()

    async def aclose(self) -> None:
        """Park every live session and stop the idle reaper (see ``park``)."""
        await self.park()

    async def _stop_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None

    def handed_over(self, session_id: str) -> bool:
        """Did a session of this id end here without ending on record (parked while its
        call goes on elsewhere or later), and has it not been resumed here since? Asked as
        often as needed: a resume that could not happen yet (the database still away, the
        conversation's turn still unwinding) is tried again."""
        return session_id in self._parked

    def handed_over_ids(self) -> list[str]:
        """Every call ``handed_over`` says yes of, oldest first."""
        return list(self._parked)

    def _forget(self, session: PluginSession) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
            if session.parked:
                self._parked[session.id] = None
                while len(self._parked) > 10_000:  # bounded: only the latest matter
                    del self._parked[next(iter(self._parked))]

    def _ensure_reaper(self) -> None:
        reaper = self._reaper
        if self.idle_timeout is None or (
            reaper is not None
            and not reaper.done()
            and reaper.get_loop() is asyncio.get_running_loop()
        ):
            return
        self._reaper = asyncio.create_task(self._reap_loop(), name="chatbridge-idle-reaper")

    async def _reap_loop(self) -> None:
        assert self.idle_timeout is not None
        interval = min(max(self.idle_timeout / 4, 0.05), 30.0)
        while self._sessions:
            await asyncio.sleep(interval)
            await self.reap_idle()
