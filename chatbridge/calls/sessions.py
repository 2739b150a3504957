"""Plugin sessions: one live tool call each, held by a process-wide ``SessionManager``
(``chatbridge.calls.manager``).

A ``PluginSession`` runs its tool in its own asyncio task and is the tool's
``CapabilityHost``: questions become ``elicit`` events and wait for ``respond_to_elicit``;
logs and progress become events; completions go to the sampler. Nothing here belongs to a
socket: whoever drives a session reads ``next_event()`` and answers, and may come and go.

The session is one class composed of named collaborators, each owning its own state: its
``events`` (``EventQueue``), its ``questions`` (the open question and its answers,
``chatbridge.calls.questions``), its ``stops`` (abort, compensation, parking,
``chatbridge.calls.session_stops``) and its ``changes`` (an earlier answer changed,
``chatbridge.calls.session_changes``). They share the call's ``CallState``, its journal and its
``CommitmentGuard``; the session's own methods are what its hosts and the tool call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from chatbridge.author.approval import DENIED_BY, denial_reason
from chatbridge.author.elicit import ElicitId, ElicitRequest, ElicitResult
from chatbridge.author.exceptions import (
    ChatBridgeError,
    JournalWriteFailed,
    SessionAborted,
    TooManyRefusedAnswers,
)
from chatbridge.author.exits import Change
from chatbridge.author.sampling import Sampler, SampleRequest, SampleResult
from chatbridge.author.tools import Commitment, McpTool
from chatbridge.calls.commitment import AbortDecision, CommitmentGuard
from chatbridge.calls.context import CallContext, CallState
from chatbridge.calls.events import (
    AbortedEvent,
    CompletedEvent,
    EventQueue,
    FailedEvent,
    LogEvent,
    ProgressEvent,
    SessionEvent,
    SessionObserver,
    observe,
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
from chatbridge.calls.outcome import Outcome, aborted, completed, failed
from chatbridge.calls.questions import (
    MAX_REFUSED_ANSWERS,
    FieldErrors,
    Question,
    QuestionAnswers,
    SessionQuestions,
)
from chatbridge.calls.session_changes import AnswerChanged, SessionChanges
from chatbridge.calls.session_info import SessionInfo, SessionStatus
from chatbridge.calls.session_stops import PARKED, SessionStops

__all__ = ["Clock", "PluginSession", "SessionInfo", "SessionStatus"]

logger = logging.getLogger("chatbridge.sessions")

Clock = Callable[[], float]


class PluginSession:
    """One tool call: its task, status, events, questions and journal (see the module
    docstring)."""

    __slots__ = (  # one per call, thousands suspended: no dict
        "_clock",
        "_denial",
        "_ending",
        "_guard",
        "_journal",
        "_last_activity",
        "_on_finish",
        "_outcome",
        "_sampler",
        "_state",
        "_status",
        "_task",
        "call_id",
        "changes",
        "created_at",
        "events",
        "id",
        "journal_store",
        "meta",
        "observer",
        "params",
        "questions",
        "stops",
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
        self._denial: str | None = None  # the user's reason for denying the call
        self._outcome: Outcome | None = None
        self._journal = Journal(tool.name, journal)
        self._sampler = sampler
        self._clock = clock
        self._on_finish = on_finish
        self._state = CallState(tool, call_id, params.model_dump(mode="json"), self, self._journal)
        # Which answer committed the call, and a request to stop made since (one restored
        # from the record applies once the replay reaches the commitment again).
        self._guard = CommitmentGuard(tool.commitments)
        self._guard.abort = abort_requested
        self._state.on_answer = self._guard.observe
        self._status: SessionStatus = "running"
        self.events = EventQueue()
        # The end decided and being put on record: hosts hear of it once it is (DESIGN §11).
        self._ending: SessionEvent | None = None
        self.questions = SessionQuestions(
            self,
            self._guard,
            self._state,
            url_links,
            refused_on_record=refused_on_record,
            max_refused=max_refused or None,
        )
        self.stops = SessionStops(self, self._guard, self._state)
        self.changes = SessionChanges(
            self, tool, self._journal, self._guard, self._state, url_links
        )
        self._task: asyncio.Task[None] | None = None
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
        return self.events.terminal is not None

    @property
    def over(self) -> bool:
        """Ended, or its end decided and being put on record: nothing more happens in it."""
        return self.events.terminal is not None or self._ending is not None

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The task running the tool (None until ``start``)."""
        return self._task

    @property
    def aborted_by(self) -> str | None:
        """Who stopped the call, for the record (``SessionStops``)."""
        return self.stops.aborted_by

    @property
    def parked(self) -> bool:
        """True once the session was parked (it ended here, not on record)."""
        return self.stops.parked

    @property
    def question(self) -> Question | None:
        """The open question, if any: its request, refused answers and what a host showed."""
        return self.questions.question

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
        while self.events.terminal is None and self._status != "awaiting_elicit":
            await self.events.wait()

    # -- CapabilityHost ---------------------------------------------------------------------

    async def complete(self, request: SampleRequest) -> SampleResult:
        self.set_status("awaiting_sample")
        await observe(self.observer, lambda o: o.status_changed(self))
        try:
            return await self._sampler(request)
        finally:
            self.set_status("running")
            if self._state.aborted is None and not self.stops.parked:
                await observe(self.observer, lambda o: o.status_changed(self))

    async def requested(self, seq: int, kind: EntryKind, key: str, request: dict[str, Any]) -> None:
        await observe(
            self.observer, lambda o: o.capability_requested(self, seq, kind, key, request)
        )

    async def step_started(self, entry: JournalEntry, request: dict[str, Any]) -> None:
        # On record first, fenced by the lease: a side effect runs only while this worker
        # holds the call, and a run interrupted after it finds the step started.
        await self.durably(self.journal_store.start_step(self, entry, request))
        await observe(
            self.observer,
            lambda o: o.capability_requested(self, entry.seq, "step", entry.key, request),
        )

    async def recorded(self, entry: JournalEntry) -> None:
        # Durable first: the tool goes on only once its store holds the entry.
        await self.durably(self.journal_store.append(self, entry))
        await observe(self.observer, lambda o: o.capability_recorded(self, entry))

    async def durably(self, write: Awaitable[None]) -> None:
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
        if self.emit(log):
            await observe(self.observer, lambda o: o.log_emitted(self, log))

    async def emit_progress(
        self, message: str, progress: float | None, total: float | None
    ) -> None:
        note = ProgressEvent(self.id, message, progress, total)
        if self.emit(note):
            await observe(self.observer, lambda o: o.progress_emitted(self, note))

    # -- what hosts call: the collaborators' ---------------------------------------------

    async def next_event(self) -> SessionEvent:
        """The next event; once the session has ended, its terminal event again and again."""
        return await self.events.next()

    async def wait_finished(self) -> SessionEvent:
        """Wait until the session ends (without taking events); its terminal event."""
        return await self.events.wait_finished()

    def open_question(self) -> str | None:
        """The id of the open question (``CapabilityHost``: a tool asks one at a time)."""
        question = self.questions.question
        return question.id if question is not None else None

    async def ask(self, request: ElicitRequest) -> ElicitResult[Any]:
        return await self.questions.ask(request)

    async def respond_to_elicit(
        self,
        elicit_id: ElicitId | str,
        result: ElicitResult[Any] | Mapping[str, Any],
        *,
        by_page: bool = False,
    ) -> None:
        """Answer the open question (``SessionQuestions.respond_to_elicit``)."""
        await self.questions.respond_to_elicit(elicit_id, result, by_page=by_page)

    async def check_answer(
        self, elicit_id: ElicitId | str, result: ElicitResult[Any] | Mapping[str, Any]
    ) -> ElicitResult[Any]:
        """``result`` validated for the open question, not answering it (``SessionQuestions``)."""
        return await self.questions.check_answer(elicit_id, result)

    def answers_for(self, elicit_id: ElicitId | str) -> QuestionAnswers:
        """Where a form checks the posts for question ``elicit_id`` (``PluginContext``)."""
        return QuestionAnswers(self.questions, str(elicit_id))

    async def refused(self, elicit_id: str, data: dict[str, Any], errors: FieldErrors) -> None:
        """A form's own check refused an answer to the open question (``SessionQuestions``)."""
        await self.questions.refused(elicit_id, data, errors)

    def refused_too_often(self, elicit_id: ElicitId | str) -> TooManyRefusedAnswers | None:
        """Why question ``elicit_id`` closed, if its answers were refused as often as it takes."""
        return self.questions.refused_too_often(elicit_id)

    def answer_of(self, elicit_id: ElicitId | str) -> ElicitResult[Any] | None:
        """How question ``elicit_id`` of this call closed (``SessionQuestions.answer_of``)."""
        return self.questions.answer_of(elicit_id)

    async def question_closed(self, elicit_id: ElicitId | str) -> None:
        """Wait until the question ``elicit_id`` is no longer open (answered or expired)."""
        await self.questions.question_closed(elicit_id)

    async def expire(self) -> bool:
        """Nobody answered the open question in time (``SessionQuestions.expire``)."""
        return await self.questions.expire()

    @property
    def max_refused(self) -> int | None:
        """Refused answers a question of this call takes (None: no limit)."""
        return self.questions.max_refused

    @property
    def abort_requested(self) -> tuple[str, str | None] | None:
        """A request to stop made after the call committed: (reason, by)."""
        return self.stops.abort_requested

    @property
    def stopping(self) -> bool:
        """Stopped before it committed and not ended yet (``SessionStops.stopping``)."""
        return self.stops.stopping

    def abort_decision(self) -> AbortDecision:
        """What ``abort()`` would do now (nothing changes)."""
        return self.stops.abort_decision()

    async def abort(
        self, reason: str = "aborted", *, by: str | None = None, grace: float = 5.0
    ) -> AbortDecision:
        """Stop the tool and wait for its end (``SessionStops.abort``)."""
        return await self.stops.abort(reason, by=by, grace=grace)

    async def stop(self, reason: str = "aborted", *, by: str | None = None) -> AbortDecision:
        """``abort`` without waiting for the tool to end: what it decided, at once."""
        return await self.stops.stop(reason, by=by)

    async def park(self) -> None:
        """Stop the task without recording an end (``SessionStops.park``)."""
        await self.stops.park()

    def asked(self) -> Iterator[tuple[str, JournalEntry]]:
        """The call's answered questions on record (the live branch), with their ids."""
        return self.changes.asked()

    def changed_from(self, elicit_id: str) -> Change | None:
        """The earlier answer the question ``elicit_id`` was left for, if it was."""
        return self.changes.changed_from(elicit_id)

    async def change(self, elicit_id: str, target: str, *, by: str | None = None) -> Change:
        """From the open question, ask the earlier question ``target`` again
        (``SessionChanges.change``)."""
        return await self.changes.change(elicit_id, target, by=by)

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
                await self.changes.forked(changed)

    async def _run(self) -> None:
        try:
            raw = await self._body()
            result = to_json_value(raw, f"The result of tool {self.tool_name!r}")
        except SessionAborted as exc:
            note = await self.stops.compensated()
            await self.end_on_record(AbortedEvent(self.id, exc.reason, commitment=note), "aborted")
        except asyncio.CancelledError:
            if self.stops.parked:  # not an end of the call: nothing is observed or recorded
                self.announce_end(AbortedEvent(self.id, PARKED), "aborted")
                raise
            aborted = self._state.aborted
            if aborted is None:
                self.announce_end(AbortedEvent(self.id, "cancelled"), "aborted")
                raise
            await self.end_on_record(AbortedEvent(self.id, aborted.reason), "aborted")
        except Exception as exc:  # any tool bug ends the session as failed, never the process
            if not isinstance(exc, ChatBridgeError):
                logger.exception("tool %s (session %s) raised", self.tool_name, self.id)
            cause = self._state.stopped or exc  # what stopped the call, whatever it raised
            if self.stops.hand_over(cause):
                return
            note = await self.stops.compensated()
            error = f"{type(cause).__name__}: {cause}"
            await self.end_on_record(FailedEvent(self.id, error, cause, commitment=note), "failed")
        else:
            stopped = self._state.stopped
            if self._state.aborted is not None:  # it swallowed SessionAborted
                note = await self.stops.compensated()
                reason = self._state.aborted.reason
                await self.end_on_record(AbortedEvent(self.id, reason, commitment=note), "aborted")
            elif stopped is not None:  # it swallowed the failed journal write
                if self.stops.hand_over(stopped):
                    return
                error = f"{type(stopped).__name__}: {stopped}"
                await self.end_on_record(FailedEvent(self.id, error, stopped), "failed")
            else:
                note = self._guard.note("finished") if self._guard.committed else None
                await self.end_on_record(
                    CompletedEvent(self.id, result, commitment=note), "completed"
                )

    async def _approve(self, ctx: CallContext) -> None:
        """Ask whether the tool may run; a denial ends the call, aborted by ``DENIED_BY``."""
        reason = denial_reason(await ctx.ask_approval())
        if reason is not None:
            self._denial = reason
            self.stops.aborted_by = DENIED_BY
            raise SessionAborted(
                self.id, f"Denied by the user: {reason}" if reason else "Denied by the user."
            )

    def set_status(self, status: SessionStatus) -> None:
        if not self.over:
            self._status = status
            self.touch()

    def touch(self) -> None:
        self._last_activity = self._clock()
        self.updated_at = datetime.now(UTC)

    def emit(self, event: SessionEvent) -> bool:
        """Queue ``event`` for the host; False once the session has ended (it is dropped)."""
        if self.over:
            return False
        self.touch()
        self.events.put(event)
        return True

    async def end_on_record(self, event: SessionEvent, status: SessionStatus) -> None:
        """The call ends with ``event``: on record first (its observer, the recorder, writes
        it and is waited for), then its hosts hear of it (``announce_end``): nobody is told of an
        end that a crash could still take back."""
        if self.over:
            return
        self._outcome = self._outcome_of(event)
        self._status = status
        self.touch()
        self._ending = event
        try:
            await asyncio.shield(observe(self.observer, lambda o: o.session_ended(self, event)))
        finally:
            self.announce_end(event, status)

    def announce_end(self, event: SessionEvent, status: SessionStatus) -> None:
        """Announce the end (``end_on_record`` has put it there, or it is not one: parked)."""
        if self.events.terminal is not None:
            return
        self._outcome = self._outcome_of(event)
        self._status = status
        self.touch()
        self.events.end(event)
        if self._on_finish is not None:
            self._on_finish(self)

    def _outcome_of(self, event: SessionEvent) -> Outcome | None:
        """How the call ended, as a value; None while it has not, or when it was parked."""
        match event:
            case CompletedEvent():
                return completed(event.result, self._journal.entries(), self.tool.done_field)
            case FailedEvent():
                return failed(event.exception, event.error)
            case AbortedEvent():
                if self.stops.parked:
                    return None
                return aborted(event.reason, self.aborted_by, self._denial)
            case _:
                return None
