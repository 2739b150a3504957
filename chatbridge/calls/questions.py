"""A tool call's questions: the one ``Question`` of an open question, and the session's
``SessionQuestions``, which asks it (``CapabilityHost.ask``), answers, refuses and expires it,
and makes the link of a URL question (``ctx.elicit_url``).

A ``Question`` keeps what was asked, the answers refused (with their errors), what a host last
showed for it, and the answer. It is made by its ``PluginSession`` when the tool calls
``ctx.elicit`` and is the only place any of this is kept: the chat's form, a legacy MCP push, a
2026-07-28 round, a Task and a URL question's page all hand answers to it (through the
session), and it validates each one once, against the key's model with the question's context.
An answer it has validated is not validated again when it comes back (the chat's form checks a
post before its handler returns it).

It also owns the one attempts policy of every transport: a question takes ``limit`` refused
answers (``CHATBRIDGE_MAX_REFUSED_ANSWERS``, by way of the ``SessionManager``); the refusal that
reaches it closes the question by itself, no host deciding: the tool gets
``TooManyRefusedAnswers`` where it asked (the call fails, a committed one compensates), and so
does whoever handed in that answer, instead of the usual ``ElicitValidationError``.

``SessionQuestions`` is the session's collaborator for this (``chatbridge.calls.sessions``): it
owns the open question, the last one asked and the refusals a resumed call restores; the
session asks it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from chatbridge.author.elicit import (
    Accept,
    Cancel,
    ElicitId,
    ElicitRequest,
    ElicitResult,
    result_from_dict,
    result_to_dict,
    validate_result,
)
from chatbridge.author.exceptions import (
    ElicitNotPending,
    ElicitValidationError,
    TooManyRefusedAnswers,
    UrlQuestionsUnavailable,
    technical_errors,
)
from chatbridge.author.storable import for_the_record
from chatbridge.calls.commitment import CommitmentGuard
from chatbridge.calls.context import CallState
from chatbridge.calls.events import ElicitEvent, observe
from chatbridge.calls.links import UrlLinks
from chatbridge.calls.outcome import BY_EXPIRY

if TYPE_CHECKING:
    from chatbridge.calls.sessions import PluginSession

__all__ = [
    "EXPIRED",
    "EXPIRED_BY",
    "MAX_REFUSED_ANSWERS",
    "ON_ITS_PAGE",
    "FieldErrors",
    "Question",
    "QuestionAnswers",
    "Refusal",
    "SessionQuestions",
]

logger = logging.getLogger("chatbridge.sessions")

# Refused answers a question takes before it closes, when nothing else is configured: enough
# for a person to read the errors and fix a typo or two, few enough that a client sending the
# same bad answer again and again is stopped within seconds (``CHATBRIDGE_MAX_REFUSED_ANSWERS``).
MAX_REFUSED_ANSWERS = 5

FieldErrors = dict[str, list[str]]
_NO_ERRORS: Mapping[str, list[str]] = MappingProxyType({})


@dataclass(frozen=True)
class Refusal:
    """An answer the question refused: the content as it came, and why (in field errors)."""

    data: dict[str, Any]
    errors: FieldErrors


class Question:
    """An open question (see the module docstring); ``attempts`` starts from the refusals on
    record when a resumed call asks it again; ``limit``: the refused answers it takes (None or
    0: as many as it gets)."""

    __slots__ = (  # one per open question: no dict
        "_checked",
        "_closing",
        "_future",
        "answer",
        "attempts",
        "by_page",
        "error",
        "errors",
        "limit",
        "refusals",
        "refused_too_often",
        "request",
        "shown",
    )

    def __init__(
        self, request: ElicitRequest, *, attempts: int = 0, limit: int | None = None
    ) -> None:
        self.request = request
        self.attempts = attempts  # refused answers, counted here and nowhere else
        self.limit = limit
        # Why it closed, when its answers were refused as often as it takes.
        self.refused_too_often: TooManyRefusedAnswers | None = None
        self.refusals: tuple[Refusal, ...] = ()  # most questions see none: no list each
        self.error: ElicitValidationError | None = None  # the last refusal by the model
        # The last refusal's field errors, whoever refused it (none yet: one shared empty map).
        self.errors: Mapping[str, list[str]] = _NO_ERRORS
        # What a host last showed for it: the chat's form (``ElicitForm``, read back by type),
        # a 2026-07-28 round's ``input_required`` or a task's request (each host only asks
        # whether it was handed out). ``object``: no host reads another's as its own.
        self.shown: object | None = None
        self.answer: ElicitResult[Any] | None = None
        self.by_page = False  # answered on its URL page: the page's link is spent already
        self._future: asyncio.Future[ElicitResult[Any]] = asyncio.get_running_loop().create_future()
        self._checked: object = None  # the content this question validated last
        self._closing = False  # taking no answer: it is being left (a change on its way)

    @property
    def id(self) -> str:
        return str(self.request.id)

    @property
    def open(self) -> bool:
        """Not answered, expired, failed or refused too often yet, and not being left."""
        return not self._future.done() and not self._closing

    def closing(self) -> None:
        """Take no answer from now on: the question is being left (an earlier answer is
        changed, and the change is being put on record); ``fail`` closes it then."""
        self._closing = True

    @property
    def ended(self) -> bool:
        """Closed by an answer, an expiry, an abort or its refused answers (not cancelled:
        parked)."""
        return self._future.done() and not self._future.cancelled()

    def check(self, result: ElicitResult[Any] | Mapping[str, Any]) -> ElicitResult[Any]:
        """``result`` validated for this question (a JSON form is parsed first); a refused
        answer is counted and kept before ``ElicitValidationError`` is raised, or
        ``TooManyRefusedAnswers`` when it was the last one the question takes."""
        model = self.request.schema.model
        if isinstance(result, Mapping):
            raw = result
            try:
                result = result_from_dict(raw)
            except ValueError as exc:
                error = ElicitValidationError(
                    self.id, model.__name__, [{"loc": ("action",), "msg": str(exc)}]
                )
                content = raw.get("content")
                data = dict(content) if isinstance(content, Mapping) else {}
                self.refuse(data, error.field_errors(), error)
                if self.refused_too_often is not None:
                    raise self.refused_too_often from error
                raise error from None
        if result.accepted and result.content is self._checked:
            return result  # validated here already (a form's post, returned by its handler)
        try:
            validated = validate_result(result, model, self.id, context=self.request.context)
        except ElicitValidationError as exc:
            self.refuse(result_to_dict(result).get("content") or {}, exc.field_errors(), exc)
            if self.refused_too_often is not None:
                raise self.refused_too_often from exc
            raise
        if validated.accepted:
            self._checked = validated.content
        return validated

    def refuse(
        self, data: dict[str, Any], errors: FieldErrors, error: ElicitValidationError | None = None
    ) -> Refusal:
        """Count a refused answer (by the model, or by a form's own checks before it); the one
        that reaches ``limit`` closes the question (``refused_too_often`` says why)."""
        refusal = Refusal(dict(data), errors)
        self.attempts += 1
        self.refusals += (refusal,)
        self.errors = errors
        if error is not None:
            self.error = error
        if self.limit and self.attempts >= self.limit and self.open:
            closed = TooManyRefusedAnswers(self.id, self.request.key, self.attempts, errors)
            self.refused_too_often = closed
            self._future.set_exception(closed)  # raised in the tool where it asked
        return refusal

    def settle(self, result: ElicitResult[Any]) -> None:
        """Close the question with ``result`` (already checked): the tool resumes with it."""
        self.answer = result
        self._future.set_result(result)

    def fail(self, exc: BaseException) -> None:
        """Close the question with ``exc`` raised in the tool (an abort, a change)."""
        if not self._future.done():
            self._future.set_exception(exc)

    def wait(self) -> asyncio.Future[ElicitResult[Any]]:
        """Await it for the answer, once there is one (what ``ctx.elicit`` returns). The
        future itself, not a coroutine awaiting it: a waiting call keeps one frame less."""
        return self._future

    async def closed(self) -> None:
        """Wait until the question is no longer open (answered, expired, failed)."""
        await asyncio.wait({self._future})

    def __repr__(self) -> str:
        state = "open" if self.open else "closed"
        return f"<Question {self.id} {state}, {self.attempts} refused>"


ON_ITS_PAGE = "This question is answered on its own page: open its link to continue."
EXPIRED = "expired: no answer in time"
EXPIRED_BY = BY_EXPIRY


class SessionQuestions:
    """A session's open question (see the module docstring)."""

    __slots__ = (
        "_guard",
        "_last",
        "_links",
        "_question",
        "_refused_on_record",
        "_session",
        "_state",
        "max_refused",
    )

    def __init__(
        self,
        session: PluginSession,
        guard: CommitmentGuard,
        state: CallState,
        links: UrlLinks | None,
        *,
        refused_on_record: tuple[str, int] | None,
        max_refused: int | None,
    ) -> None:
        self._session, self._guard, self._state, self._links = session, guard, state, links
        # The open question (it keeps its refused answers and what a host showed), the last
        # one asked (hosts tell an answer its page reported from an expiry by it), and the
        # refusals on record of the question a resumed call asks again.
        self._question: Question | None = None
        self._last: Question | None = None
        self._refused_on_record = refused_on_record
        self.max_refused = max_refused  # refused answers a question takes (None: no limit)

    @property
    def question(self) -> Question | None:
        """The open question, if any: its request, refused answers and what a host showed."""
        question = self._question
        return question if question is not None and question.open else None

    def open_question(self) -> str | None:
        """The id of the open question (``CapabilityHost``: a tool asks one at a time)."""
        question = self.question
        return question.id if question is not None else None

    def open(self, elicit_id: str) -> Question:
        """The open question, if its id is ``elicit_id``; else ``ElicitNotPending``."""
        question = self.question
        if question is None or question.id != elicit_id:
            raise ElicitNotPending(self._session.id, elicit_id, question.id if question else None)
        return question

    async def check_answer(
        self, elicit_id: ElicitId | str, result: ElicitResult[Any] | Mapping[str, Any]
    ) -> ElicitResult[Any]:
        """``result`` validated for the open question ``elicit_id`` without answering it (a
        form checks each post so); a refused answer is counted, reported and raised (the last
        one the question takes as ``TooManyRefusedAnswers``: it has closed)."""
        question = self.open(str(elicit_id))
        try:
            return question.check(result)
        except (ElicitValidationError, TooManyRefusedAnswers):
            await self._report_refusal(question)
            raise

    def answers_for(self, elicit_id: ElicitId | str) -> QuestionAnswers:
        """Where a form checks the posts for question ``elicit_id`` (``PluginContext``)."""
        return QuestionAnswers(self, str(elicit_id))

    async def refused(self, elicit_id: str, data: dict[str, Any], errors: FieldErrors) -> None:
        """A form's own check (before the model's) refused an answer to the open question;
        ``TooManyRefusedAnswers`` when it was the last one the question takes."""
        question = self.open(elicit_id)
        question.refuse(data, errors)
        await self._report_refusal(question)
        if question.refused_too_often is not None:
            raise question.refused_too_often

    def refused_too_often(self, elicit_id: ElicitId | str) -> TooManyRefusedAnswers | None:
        """Why this call's question ``elicit_id`` closed, if its answers were refused as often
        as a question allows (hosts tell whoever answered last)."""
        last = self._last
        if last is not None and last.id == str(elicit_id):
            return last.refused_too_often
        return None

    async def respond_to_elicit(
        self,
        elicit_id: ElicitId | str,
        result: ElicitResult[Any] | Mapping[str, Any],
        *,
        by_page: bool = False,
    ) -> None:
        """Answer the open question; invalid content raises and leaves it open, unless it was
        the last refused answer the question takes (``TooManyRefusedAnswers``: it closed).

        A URL question (``ctx.elicit_url``) takes ``Accept`` only from its page (``by_page``):
        a host may decline or cancel it, never answer it. A page's answer that its link
        validated in this process (content of the question's model) is not validated again.
        """
        wanted = str(elicit_id)
        question = self.open(wanted)
        request = question.request
        if request.mode == "url" and not by_page:
            accepts = result.get("action") if isinstance(result, Mapping) else result.action
            if accepts == "accept":  # not counted as a refused answer: nothing was checked
                model = request.schema.model.__name__
                msg = [{"loc": ("action",), "msg": ON_ITS_PAGE}]
                raise ElicitValidationError(wanted, model, msg)
        if by_page and isinstance(result, Accept) and type(result.content) is request.schema.model:
            validated: ElicitResult[Any] = result  # the page's link validated it, just now
        else:
            validated = await self.check_answer(wanted, result)
        if request.mode == "url" and not by_page and self._links is not None:
            # A host's Decline or Cancel races the page: the one that closes the link first
            # ends the question. The page won: its answer is on its way here.
            won = await self._links.close(request)
            if not won or self._question is not question or not question.open:
                raise ElicitNotPending(self._session.id, wanted, None)
        self._session.touch()
        self._resolve(question, validated, by_page=by_page)

    def _resolve(self, question: Question, result: ElicitResult[Any], *, by_page: bool) -> None:
        """Close the question with ``result``; an answer that commits the call commits it now,
        before the tool resumes: from here an abort cannot undo it (see ``abort``)."""
        self._guard.observe(question.request.key, result)
        question.by_page = by_page
        question.settle(result)

    async def _report_refusal(self, question: Question) -> None:
        refusal = question.refusals[-1]
        record = technical_errors(refusal.errors)  # the record keeps the validators' own words
        kept = for_the_record(refusal.data)  # as it came, even NaN or a NUL character
        session = self._session
        await observe(
            session.observer,
            lambda o: o.answer_rejected(session, question.id, kept, record),
        )

    async def expire(self) -> bool:
        """Answer the open question with ``Cancel`` (nobody answered in time); a committed
        call that can compensate is stopped there instead, and compensates."""
        await self.page_answered()  # a page that reported first answered it: not expired
        question = self.question
        if question is None:
            return False
        commitment = self._guard.commitment
        if commitment is not None and commitment.compensate is not None:
            await self._session.stops.abort_committed(EXPIRED, EXPIRED_BY)
            return True
        session = self._session
        session.touch()
        await observe(
            session.observer,
            lambda o: o.answer_rejected(session, question.id, {}, {"__all__": [EXPIRED]}),
        )
        if question.open:
            question.settle(Cancel())
        return True

    def answer_of(self, elicit_id: ElicitId | str) -> ElicitResult[Any] | None:
        """How this call's question ``elicit_id`` closed (answered, declined, cancelled,
        expired), or None if it is open, was never asked, was left for a change of an earlier
        answer, or is another call's. Kept through a replay (the journal numbers questions)."""
        wanted = str(elicit_id)
        last = self._last
        if last is not None and last.id == wanted and last.answer is not None:
            return last.answer
        try:
            parsed = ElicitId.parse(wanted)
        except ValueError:
            return None
        if (parsed.tool_name, parsed.call_id) != (self._session.tool_name, self._session.call_id):
            return None
        for asked_id, entry in self._session.changes.asked():
            if asked_id == wanted:
                return result_from_dict(entry.result)
        return None

    async def question_closed(self, elicit_id: ElicitId | str) -> None:
        """Wait until the question ``elicit_id`` is no longer open (answered or expired)."""
        question = self.question
        if question is not None and question.id == str(elicit_id):
            await question.closed()

    async def ask(self, request: ElicitRequest) -> ElicitResult[Any]:
        session = self._session
        if self._guard.stops_at_question():  # committed and asked to stop: it stops here
            raise session.stops.stop_for_compensation()
        attempts = 0
        restored, self._refused_on_record = self._refused_on_record, None
        if restored is not None and restored[0] == str(request.id):
            attempts = restored[1]  # its refusals on record: it keeps counting from there
        question = Question(
            session.changes.offered(request), attempts=attempts, limit=self.max_refused
        )
        self._question = self._last = question
        try:
            if request.mode == "url":
                await self._link(question)
            if question.open:  # a URL question's page may have answered it already
                session.set_status("awaiting_elicit")
                await observe(session.observer, lambda o: o.status_changed(session))
                session.emit(ElicitEvent(session.id, question.request))
            return await question.wait()
        finally:
            self._question = None
            question.shown = None
            # Answered here, expired or aborted (not parked, which cancels it): the link is
            # spent. A page that answered spent it already.
            if request.mode == "url" and question.ended and not question.by_page:
                await self._close_link(question.request)
            session.set_status("running")
            if self._state.aborted is None and not session.stops.parked:
                await observe(session.observer, lambda o: o.status_changed(session))

    async def _link(self, question: Question) -> None:
        """Fill in a URL question's link; answer it at once if its page already reported
        (while no session held it, or in an earlier run of a replayed call)."""
        request = question.request
        if self._links is None:
            raise UrlQuestionsUnavailable(self._session.tool_name, request.key)
        opened = await self._links.open(request, self._session.meta)
        question.request = dataclasses.replace(request, url=opened.url)
        if opened.answer is not None and question.open:  # read back from the record: checked
            self._resolve(question, question.check(opened.answer), by_page=True)

    async def page_answered(self) -> None:
        """Before an abort: close the open URL question's link, so its page can no longer
        report; if the page reported first, its answer stands (a payment taken is a payment
        taken) and closes the question as if it had arrived before the abort."""
        question = self.question
        if question is None or question.request.mode != "url" or not self._links:
            return
        request = question.request
        if await self._links.close(request) or not question.open:
            return
        answered = await self._links.answer(request)
        if answered is not None and question.open and self._question is question:
            self._resolve(question, question.check(answered), by_page=True)

    async def _close_link(self, request: ElicitRequest) -> None:
        """The question is over: its link stops working (best effort: it also expires)."""
        if self._links is None:
            return
        try:
            await self._links.close(request)
        except Exception:
            logger.exception("closing the link of %s failed", request.id)


class QuestionAnswers:
    """A form's ``AnswerDesk`` (``chatbridge.author.plugins``): the posts it checks go to the
    session's open question ``elicit_id``, which validates, counts and reports them."""

    __slots__ = ("_elicit_id", "_questions")

    def __init__(self, questions: SessionQuestions, elicit_id: str) -> None:
        self._questions, self._elicit_id = questions, elicit_id

    async def check(self, result: ElicitResult[Any]) -> ElicitResult[Any]:
        return await self._questions.check_answer(self._elicit_id, result)

    async def refuse(self, data: dict[str, Any], errors: FieldErrors) -> None:
        await self._questions.refused(self._elicit_id, data, errors)
