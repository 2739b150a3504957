"""Plugin sessions: one live tool call each, held by a process-wide ``SessionManager``
(``chatbridge.calls.manager``).

A ``PluginSession`` runs its tool in its own asyncio task and is the tool's
``CapabilityHost``: questions become ``elicit`` events and wait for ``respond_to_elicit``;
logs and progress become events; completions go to the sampler. Nothing here belongs to a
socket: whoever drives a session reads ``next_event()`` and answers, and may come and go.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from chatbridge.author.approval import DENIED_BY, denial_reason
from chatbridge.author.elicit import ElicitRequest
from chatbridge.author.exceptions import (
    ChatBridgeError,
    JournalWriteFailed,
    SessionAborted,
)
from chatbridge.author.exits import Change
from chatbridge.author.sampling import Sampler, SampleRequest, SampleResult
from chatbridge.author.tools import Commitment, McpTool
from chatbridge.calls.call_state import CallState
from chatbridge.calls.commitment import CommitmentGuard
from chatbridge.calls.context import CallContext
from chatbridge.calls.events import (
    AbortedEvent,
    CompletedEvent,
    FailedEvent,
    LogEvent,
    ProgressEvent,
    SessionEvent,
)
from chatbridge.calls.journal import (
    EntryKind,
    Journal,
    JournalEntry,
    JournalStore,
    MemoryJournalStore,
    to_json_value,
)
from chatbridge.calls.links import UrlLinks
from chatbridge.calls.observer import SessionObserver, observe
from chatbridge.calls.outcome import Outcome, aborted, completed, failed
from chatbridge.calls.question import MAX_REFUSED_ANSWERS, Question
from chatbridge.calls.session_changes import AnswerChanged, SessionChanges
from chatbridge.calls.session_events import SessionEvents
from chatbridge.calls.session_info import SessionInfo, SessionStatus
from chatbridge.calls.session_questions import SessionQuestions
from chatbridge.calls.session_stops import PARKED, SessionStops

__all__ = ["Clock", "PluginSession", "SessionInfo", "SessionStatus"]

logger = logging.getLogger("chatbridge.sessions")

Clock = Callable[[], float]


class PluginSession(SessionEvents, SessionQuestions, SessionStops, SessionChanges):
    """One tool call: its task, status, pending question, events and journal."""

    __slots__ = (  # one per call, thousands suspended: no dict
        "_changed",
        "_clock",
        "_denial",
        "_ending",
        "_events",
        "_guard",
        "_journal",
        "_last",
        "_last_activity",
        "_links",
        "_on_finish",
        "_outcome",
        "_parked",
        "_question",
        "_refused_on_record",
        "_sampler",
        "_state",
        "_status",
        "_task",
        "_terminal",
        "_wakeups",
        "aborted_by",
        "call_id",
        "created_at",
        "id",
        "journal_store",
        "max_refused",
        "meta",
        "observer",
        "params",
        "tool",
        "updated_at",
    )

    def __init__(
        self,
        tool: McpTool[Any, Any],
        params: BaseModel,
        call_id: str,
        *,
        journal: Iterable[JournalEntry | Mapping[str, Any]] = (),
        sampler: Sampler,
        clock: Clock = time.monotonic,
        on_finish: Callable[[PluginSession], None] | None = None,
        observer: SessionObserver | None = None,
        journal_store: JournalStore | None = None,
        meta: Mapping[str, str] | None = None,
        url_links: UrlLinks | None = None,
        abort_requested: tuple[str, str | None] | None = None,
        refused_on_record: tuple[str, int] | None = None,
        max_refused: int | None = MAX_REFUSED_ANSWERS,
    ) -> None:
        self.tool = tool
        self.id = self.call_id = call_id
        self.params = params
        self.meta = dict(meta or {})
        self.observer = observer
        self.journal_store: JournalStore = journal_store or MemoryJournalStore()
        self.aborted_by: str | None = None
        self._denial: str | None = None  # the user's reason for denying the call
        self._outcome: Outcome | None = None
        self._journal = Journal(tool.name, journal)
        self._sampler = sampler
        self._links = url_links
        self._clock = clock
        self._on_finish = on_finish
        self._state = CallState(tool, call_id, params.model_dump(mode="json"), self, self._journal)
        # Which answer committed the call, and a request to stop made since (one restored
        # from the record applies once the replay reaches the commitment again).
        self._guard = CommitmentGuard(tool.commitments)
        self._guard.abort = abort_requested
        self._state.on_answer = self._guard.observe
        self._status: SessionStatus = "running"
        # Events not consumed yet and futures of waiters, each a list only while it holds
        # something: a suspended session costs little memory (bench/memory.py).
        self._events: list[SessionEvent] | None = None
        self._wakeups: list[asyncio.Future[None]] | None = None  # while someone waits
        self._terminal: SessionEvent | None = None
        # The end decided and being put on record: hosts hear of it once it is (DESIGN §11).
        self._ending: SessionEvent | None = None
        # The open question (it keeps its refused answers and what a host showed), the last
        # one asked (hosts tell an answer its page reported from an expiry by it), and the
        # refusals on record of the question a resumed call asks again.
        self._question: Question | None = None
        self._last: Question | None = None
        self._refused_on_record = refused_on_record
        self.max_refused = max_refused or None  # refused answers a question takes (0: no limit)
        self._task: asyncio.Task[None] | None = None
        self._parked = False
        self._changed: tuple[str, Change] | None = None  # the last change of an answer
        self.created_at = self.updated_at = datetime.now(UTC)
        self._last_activity = clock()

    # -- inspection -----------------------------------------------------------------------

    @property
    def tool_name(self) -> str:
        return self.tool.name

    @property
    def status(self) -> SessionStatus:
        return self._status

    @property
    def pending(self) -> ElicitRequest | None:
        """The request of the open question, if any."""
        question = self.question
        return question.request if question is not None else None

    @property
    def journal(self) -> list[dict[str, Any]]:
        """Every capability result so far, JSON-serialisable, in ``seq`` order."""
        return self._journal.to_list()

    @property
    def outcome(self) -> Outcome | None:
        """How the call ended (None until it has, or if it was parked)."""
        return self._outcome

    @property
    def finished(self) -> bool:
        return self._terminal is not None

    @property
    def commitment(self) -> Commitment | None:
        """The commitment this call made (its answer on record), or None."""
        return self._guard.commitment

    def idle_seconds(self) -> float:
        """How long the session has waited for an answer (0 unless awaiting one)."""
        if self._status != "awaiting_elicit":
            return 0.0
        return max(0.0, self._clock() - self._last_activity)

    def info(self) -> SessionInfo:
        pending = self.pending
        return SessionInfo(
            id=self.id,
            tool_name=self.tool_name,
            call_id=self.call_id,
            status=self._status,
            pending_key=pending.key if pending else None,
            pending_message=pending.message if pending else None,
            pending_elicit_id=str(pending.id) if pending else None,
            created_at=self.created_at,
            updated_at=self.updated_at,
            idle_seconds=self.idle_seconds(),
        )

    # -- driving ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"chatbridge-session:{self.id}")

    async def settled(self) -> None:
        """Wait until the session waits for an answer or has ended."""
        while self._terminal is None and self._status != "awaiting_elicit":
            await self._wait()

    # -- CapabilityHost ---------------------------------------------------------------------

    async def complete(self, request: SampleRequest) -> SampleResult:
        self._set_status("awaiting_sample")
        await observe(self.observer, lambda o: o.status_changed(self))
        try:
            return await self._sampler(request)
        finally:
            self._set_status("running")
            if self._state.aborted is None and not self._parked:
                await observe(self.observer, lambda o: o.status_changed(self))

    async def requested(self, seq: int, kind: EntryKind, key: str, request: dict[str, Any]) -> None:
        await observe(
            self.observer, lambda o: o.capability_requested(self, seq, kind, key, request)
        )

    async def step_started(self, entry: JournalEntry, request: dict[str, Any]) -> None:
        # On record first, fenced by the lease: a side effect runs only while this worker
        # holds the call, and a run interrupted after it finds the step started.
        await self._durably(self.journal_store.start_step(self, entry, request))
        await observe(
            self.observer,
            lambda o: o.capability_requested(self, entry.seq, "step", entry.key, request),
        )

    async def recorded(self, entry: JournalEntry) -> None:
        # Durable first: the tool goes on only once its store holds the entry.
        await self._durably(self.journal_store.append(self, entry))
        await observe(self.observer, lambda o: o.capability_recorded(self, entry))

    async def _durably(self, write: Awaitable[None]) -> None:
        """Await the journal store: its ``ChatBridgeError`` (another worker took the call)
        says what happened; any other failure is a journal write that did not happen."""
        try:
            await write
        except ChatBridgeError:
            raise
        except Exception as exc:
            logger.warning("journal write of session %s failed: %r", self.id, exc)
            first_line = next(iter(str(exc).splitlines()), "")  # PostgreSQL adds CONTEXT lines
            raise JournalWriteFailed(self.id, f"{type(exc).__name__}: {first_line}") from exc

    async def emit_log(self, level: str, message: str, data: dict[str, Any]) -> None:
        log = LogEvent(self.id, level, message, data)
        if self._emit(log):
            await observe(self.observer, lambda o: o.log_emitted(self, log))

    async def emit_progress(
        self, message: str, progress: float | None, total: float | None
    ) -> None:
        note = ProgressEvent(self.id, message, progress, total)
        if self._emit(note):
            await observe(self.observer, lambda o: o.progress_emitted(self, note))

    # -- internals --------------------------------------------------------------------------

    async def _body(self) -> Any:
        """The tool from the start (its approval first), again each time an earlier answer is
        changed (``chatbridge.calls.session_changes``): the run replays up to the changed
        question and asks it anew."""
        while True:
            ctx = CallContext(self._state)
            try:
                if self.tool.needs_approval:
                    await self._approve(ctx)
                return await self.tool.fn(self.params, ctx)
            except AnswerChanged as changed:
                await self.forked(changed)

    async def _run(self) -> None:
        try:
            raw = await self._body()
            result = to_json_value(raw, f"The result of tool {self.tool_name!r}")
        except SessionAborted as exc:
            note = await self._compensated()
            await self._end(AbortedEvent(self.id, exc.reason, commitment=note), "aborted")
        except asyncio.CancelledError:
            if self._parked:  # not an end of the call: nothing is observed or recorded
                self._finish(AbortedEvent(self.id, PARKED), "aborted")
                raise
            aborted = self._state.aborted
            if aborted is None:
                self._finish(AbortedEvent(self.id, "cancelled"), "aborted")
                raise
            await self._end(AbortedEvent(self.id, aborted.reason), "aborted")
        except Exception as exc:  # any tool bug ends the session as failed, never the process
            if not isinstance(exc, ChatBridgeError):
                logger.exception("tool %s (session %s) raised", self.tool_name, self.id)
            cause = self._state.stopped or exc  # what stopped the call, whatever it raised
            if self._hand_over(cause):
                return
            note = await self._compensated()
            error = f"{type(cause).__name__}: {cause}"
            await self._end(FailedEvent(self.id, error, cause, commitment=note), "failed")
        else:
            stopped = self._state.stopped
            if self._state.aborted is not None:  # it swallowed SessionAborted
                note = await self._compensated()
                reason = self._state.aborted.reason
                await self._end(AbortedEvent(self.id, reason, commitment=note), "aborted")
            elif stopped is not None:  # it swallowed the failed journal write
                if self._hand_over(stopped):
                    return
                error = f"{type(stopped).__name__}: {stopped}"
                await self._end(FailedEvent(self.id, error, stopped), "failed")
            else:
                note = self._guard.note("finished") if self._guard.committed else None
                await self._end(CompletedEvent(self.id, result, commitment=note), "completed")

    async def _approve(self, ctx: CallContext) -> None:
        """Ask whether the tool may run; a denial ends the call, aborted by ``DENIED_BY``."""
        reason = denial_reason(await ctx.ask_approval())
        if reason is not None:
            self._denial = reason
            self.aborted_by = DENIED_BY
            raise SessionAborted(
                self.id, f"Denied by the user: {reason}" if reason else "Denied by the user."
            )

    def _set_status(self, status: SessionStatus) -> None:
        if self._terminal is None and self._ending is None:
            self._status = status
            self._touch()

    def _touch(self) -> None:
        self._last_activity = self._clock()
        self.updated_at = datetime.now(UTC)

    def _emit(self, event: SessionEvent) -> bool:
        """Queue ``event`` for the host; False once the session has ended (it is dropped)."""
        if self._terminal is not None or self._ending is not None:
            return False
        self._touch()
        self._queue(event)
        self._wake()
        return True

    async def _end(self, event: SessionEvent, status: SessionStatus) -> None:
        """The call ends with ``event``: on record first (its observer, the recorder, writes
        it and is waited for), then its hosts hear of it (``_finish``): nobody is told of an
        end that a crash could still take back."""
        if self._terminal is not None or self._ending is not None:
            return
        self._outcome = self._outcome_of(event)
        self._status = status
        self._touch()
        self._ending = event
        try:
            await asyncio.shield(observe(self.observer, lambda o: o.session_ended(self, event)))
        finally:
            self._finish(event, status)

    def _finish(self, event: SessionEvent, status: SessionStatus) -> None:
        """Announce the end (``_end`` has put it on record, or it is not one: parked)."""
        if self._terminal is not None:
            return
        self._outcome = self._outcome_of(event)
        self._status = status
        self._touch()
        self._queue(event)
        self._terminal = event
        self._wake()
        if self._on_finish is not None:
            self._on_finish(self)

    def _outcome_of(self, event: SessionEvent) -> Outcome | None:
        """How the call ended, as a value; None while it has not, or when it was parked."""
        match event:
            case CompletedEvent():
                return completed(event.result, self._journal.entries())
            case FailedEvent():
                return failed(event.exception, event.error)
            case AbortedEvent():
                if self._parked:
                    return None
                return aborted(event.reason, self.aborted_by, self._denial)
            case _:
                return None
