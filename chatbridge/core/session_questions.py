"""The open question of a tool call: answering it, refusing an answer, expiring it, the link
of a URL question (``ctx.elicit_url``), and asking it (``CapabilityHost.ask``).

``SessionQuestions`` is a part of ``PluginSession`` (``chatbridge.core.sessions``), kept apart
so each module stays about one thing; the session owns the state it reads and writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from chatbridge.core.commitment import AbortDecision, CommitmentGuard
from chatbridge.core.context import CallState
from chatbridge.core.elicit import (
    Cancel,
    ElicitId,
    ElicitRequest,
    ElicitResult,
    result_from_dict,
    result_to_dict,
    validate_result,
)
from chatbridge.core.events import ElicitEvent, SessionEvent
from chatbridge.core.exceptions import (
    ElicitNotPending,
    ElicitValidationError,
    SessionAborted,
    UrlQuestionsUnavailable,
    technical_errors,
)
from chatbridge.core.journal import Journal
from chatbridge.core.links import UrlLinks
from chatbridge.core.observer import SessionObserver, observe
from chatbridge.core.storable import for_the_record

if TYPE_CHECKING:
    from chatbridge.core.sessions import PluginSession

__all__ = ["EXPIRED", "EXPIRED_BY", "ON_ITS_PAGE", "SessionQuestions"]

logger = logging.getLogger("chatbridge.sessions")

ON_ITS_PAGE = "This question is answered on its own page: open its link to continue."
EXPIRED = "expired: no answer in time"
EXPIRED_BY = "expiry"

Pending = tuple[ElicitRequest, "asyncio.Future[ElicitResult[Any]]"]


class SessionQuestions:
    """A session's open question (see the module docstring)."""

    # The session's state (``PluginSession.__init__`` sets it).
    id: str
    call_id: str
    meta: dict[str, str]
    observer: SessionObserver | None
    last_answer: tuple[str, ElicitResult[Any]] | None
    pending_attempts: int
    pending_errors: ElicitValidationError | None
    pending_field_errors: dict[str, list[str]]
    shown: Any
    _pending: Pending | None
    _links: UrlLinks | None
    _guard: CommitmentGuard
    _journal: Journal
    _state: CallState
    _parked: bool

    if TYPE_CHECKING:  # the session's own, used here

        @property
        def tool_name(self) -> str: ...

        def _touch(self) -> None: ...

        def _set_status(self, status: Any) -> None: ...

        def _emit(self, event: SessionEvent) -> bool: ...

        async def _abort_committed(self, reason: str, by: str | None) -> AbortDecision: ...

        def _stop_for_compensation(self) -> SessionAborted: ...

    @property
    def _session(self) -> PluginSession:
        """This, as the session observers are told of."""
        return cast("PluginSession", self)

    async def respond_to_elicit(
        self,
        elicit_id: ElicitId | str,
        result: ElicitResult[Any] | Mapping[str, Any],
        *,
        by_page: bool = False,
    ) -> None:
        """Answer the pending question; invalid content raises and leaves it pending.

        A URL question (``ctx.elicit_url``) takes ``Accept`` only from its page (``by_page``):
        a host may decline or cancel it, never answer it.
        """
        pending = self._pending
        wanted = str(elicit_id)
        if pending is None or str(pending[0].id) != wanted or pending[1].done():
            raise ElicitNotPending(self.id, wanted, str(pending[0].id) if pending else None)
        request, future = pending
        if isinstance(result, Mapping):
            try:
                result = result_from_dict(result)
            except ValueError as exc:
                raise ElicitValidationError(
                    wanted, request.schema.model.__name__, [{"loc": ("action",), "msg": str(exc)}]
                ) from None
        if request.mode == "url" and result.accepted and not by_page:
            raise ElicitValidationError(
                wanted, request.schema.model.__name__, [{"loc": ("action",), "msg": ON_ITS_PAGE}]
            )
        try:
            validated = validate_result(
                result, request.schema.model, wanted, context=request.context
            )
        except ElicitValidationError as exc:
            self.pending_errors = exc
            data = result_to_dict(result).get("content") or {}
            await self.refused(wanted, data, exc.field_errors())
            raise
        if request.mode == "url" and not by_page and self._links is not None:
            # A host's Decline or Cancel races the page: the one that closes the link first
            # ends the question. The page won: its answer is on its way here.
            won = await self._links.close(request)
            if not won or self._pending is not pending or future.done():
                raise ElicitNotPending(self.id, wanted, None)
        self._pending = None
        self._touch()
        self._resolve(request, future, validated)

    def _resolve(
        self,
        request: ElicitRequest,
        future: asyncio.Future[ElicitResult[Any]],
        result: ElicitResult[Any],
    ) -> None:
        """Close the question with ``result``; an answer that commits the call commits it now,
        before the tool resumes: from here an abort cannot undo it (see ``abort``)."""
        self.last_answer = (str(request.id), result)
        self._guard.observe(request.key, result)
        future.set_result(result)

    async def refused(
        self, elicit_id: str, data: dict[str, Any], errors: dict[str, list[str]]
    ) -> None:
        """An answer to the open question was refused (here, or by the form that shows it)."""
        self.pending_attempts += 1
        self.pending_field_errors = errors
        record = technical_errors(errors)  # the record keeps the validators' own words
        kept = for_the_record(data)  # as it came, even NaN or a NUL character
        await observe(
            self.observer, lambda o: o.answer_rejected(self._session, elicit_id, kept, record)
        )

    async def expire(self) -> bool:
        """Answer the pending question with ``Cancel`` (nobody answered in time); a committed
        call that can compensate is stopped there instead, and compensates."""
        await self._page_answered()  # a page that reported first answered it: not expired
        pending = self._pending
        if pending is None or pending[1].done():
            return False
        commitment = self._guard.commitment
        if commitment is not None and commitment.compensate is not None:
            await self._abort_committed(EXPIRED, EXPIRED_BY)
            return True
        self._pending = None
        self._touch()
        await observe(
            self.observer,
            lambda o: o.answer_rejected(
                self._session, str(pending[0].id), {}, {"__all__": ["expired: no answer in time"]}
            ),
        )
        self.last_answer = (str(pending[0].id), Cancel())
        pending[1].set_result(Cancel())
        return True

    def answer_of(self, elicit_id: ElicitId | str) -> ElicitResult[Any] | None:
        """How this call's question ``elicit_id`` closed (answered, declined, cancelled,
        expired), or None if it is open, was never asked, or is another call's. Kept through a
        replay: the n-th question of a call is the n-th elicit of its journal."""
        wanted = str(elicit_id)
        if self.last_answer is not None and self.last_answer[0] == wanted:
            return self.last_answer[1]
        try:
            parsed = ElicitId.parse(wanted)
        except ValueError:
            return None
        if (parsed.tool_name, parsed.call_id) != (self.tool_name, self.call_id):
            return None
        asked = [e for e in self._journal.entries() if e.kind == "elicit" and e.scope == ""]
        if parsed.seq > len(asked):
            return None
        return result_from_dict(asked[parsed.seq - 1].result)

    async def question_closed(self, elicit_id: ElicitId | str) -> None:
        """Wait until the question ``elicit_id`` is no longer pending (answered or expired)."""
        pending = self._pending
        if pending is not None and str(pending[0].id) == str(elicit_id):
            await asyncio.wait({pending[1]})

    async def ask(self, request: ElicitRequest) -> ElicitResult[Any]:
        if self._guard.stops_at_question():  # committed and asked to stop: it stops here
            raise self._stop_for_compensation()
        future: asyncio.Future[ElicitResult[Any]] = asyncio.get_running_loop().create_future()
        self._pending = (request, future)
        self.pending_attempts, self.pending_errors, self.pending_field_errors = 0, None, {}
        self.shown = None
        try:
            if request.mode == "url":
                request = await self._link(request, future)
            if not future.done():  # a URL question's page may have answered it already
                self._set_status("awaiting_elicit")
                await observe(self.observer, lambda o: o.status_changed(self._session))
                self._emit(ElicitEvent(self.id, request))
            return await future
        finally:
            self._pending, self.shown = None, None
            # Answered, expired or aborted (not parked, which cancels it): the link is spent.
            if request.mode == "url" and future.done() and not future.cancelled():
                await self._close_link(request)
            self._set_status("running")
            if self._state.aborted is None and not self._parked:
                await observe(self.observer, lambda o: o.status_changed(self._session))

    async def _link(
        self, request: ElicitRequest, future: asyncio.Future[ElicitResult[Any]]
    ) -> ElicitRequest:
        """Fill in a URL question's link; answer it at once if its page already reported
        (while no session held it, or in an earlier run of a replayed call)."""
        if self._links is None:
            raise UrlQuestionsUnavailable(self.tool_name, request.key)
        request = dataclasses.replace(request, url=await self._links.open(request, self.meta))
        if self._pending is not None and self._pending[1] is future:
            self._pending = (request, future)
        answered = await self._links.answer(request)
        if answered is not None and not future.done():
            self._resolve(request, future, answered)
        return request

    async def _page_answered(self) -> None:
        """Before an abort: close the open URL question's link, so its page can no longer
        report; if the page reported first, its answer stands (a payment taken is a payment
        taken) and closes the question as if it had arrived before the abort."""
        pending = self._pending
        if pending is None or pending[1].done() or pending[0].mode != "url" or not self._links:
            return
        request, future = pending
        if await self._links.close(request) or future.done():
            return
        answered = await self._links.answer(request)
        if answered is not None and not future.done() and self._pending is pending:
            self._pending = None
            self._resolve(request, future, answered)

    async def _close_link(self, request: ElicitRequest) -> None:
        """The question is over: its link stops working (best effort: it also expires)."""
        if self._links is None:
            return
        try:
            await self._links.close(request)
        except Exception:
            logger.exception("closing the link of %s failed", request.id)
