"""Running one tool call in a conversation: approval, session, questions, result.

The chat is the call's host (``ChatHost``, one of ``chatbridge.calls.drive``'s): its questions
become forms drawn by the ``FormRenderer`` on a ``FormSurface`` that waits for their posts.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from chatbridge.author.approval import APPROVAL_KEY
from chatbridge.author.elicit import Accept, ElicitRequest, ElicitResult, result_to_dict
from chatbridge.author.exceptions import (
    ChangeRefused,
    ClaimLost,
    CommandRefused,
    DuplicateSession,
    ElicitNotPending,
    InvalidToolParams,
    JournalWriteFailed,
    TooManyRefusedAnswers,
)
from chatbridge.author.exits import offered
from chatbridge.author.language import gettext as _
from chatbridge.author.language import gettext_noop
from chatbridge.author.plugins import FieldErrors, FormPost, Plugin, PluginContext, PluginRegistry
from chatbridge.author.url_card import url_card
from chatbridge.calls.drive import EndEvent, Pause, drive
from chatbridge.calls.events import FailedEvent, LogEvent, ProgressEvent
from chatbridge.calls.manager import SessionManager
from chatbridge.calls.outcome import (
    Aborted,
    Cancelled,
    Completed,
    Declined,
    Outcome,
    call_status,
    describe,
)
from chatbridge.calls.sessions import PluginSession
from chatbridge.engine.completion import ToolCallRequest
from chatbridge.engine.conversation import (
    EventSink,
    LiveConversation,
    PendingApproval,
    PendingElicit,
    ResumableCall,
)
from chatbridge.engine.protocol import (
    ApprovalRequest,
    ChatEvent,
    ElicitComplete,
    ElicitForm,
    ElicitStart,
    LogLine,
    Phase,
    ProgressNote,
    ToolCallEvent,
)
from chatbridge.engine.tool_message import ToolReply, failed_reply, tool_message

__all__ = ["FormRenderer", "FormSurface", "ToolCallRunner", "change_answer", "ended_call"]

logger = logging.getLogger("chatbridge.engine")

# Refusals of a change, said in the person's language where they are raised (``_``).
NOT_OPEN_TO_CHANGE = gettext_noop(
    "That question is no longer open, so nothing was changed: change an answer from the "
    "question the tool asks now."
)
CHANGE_NOT_RECORDED = gettext_noop(
    "The change could not be recorded (the server's database is unavailable), so it was not "
    "made; the tool call stopped where it was, and resumes when the database is back."
)


def ended_call(
    started: ToolCallEvent, outcome: Outcome, aborted_by: str | None, commitment: str
) -> ToolCallEvent:
    """The chat's event for a call that ended with ``outcome`` (``started``: its start)."""
    update: dict[str, Any] = {"status": call_status(outcome), "outcome": outcome}
    update["commitment"] = commitment
    if isinstance(outcome, Completed | Declined | Cancelled):
        update["result"] = outcome.result
    else:
        update["error"] = describe(outcome)
    if isinstance(outcome, Aborted):
        update["aborted_by"] = aborted_by or ""
    return started.model_copy(update=update)


_ORIGINS_KEPT = 10_000


class ToolCallRunner:
    """Turns a model's tool call into a session and drives it to the tool message."""

    def __init__(
        self,
        *,
        registry: PluginRegistry,
        manager: SessionManager,
        sink: EventSink,
        render_form: FormRenderer,
        set_phase: Callable[[LiveConversation, Phase], Awaitable[None]],
    ) -> None:
        self.registry, self.manager, self.sink = registry, manager, sink
        self.render_form, self.set_phase = render_form, set_phase
        # conversation id → origin its latest socket in this process came from (bounded)
        self._origins: OrderedDict[str, str] = OrderedDict()

    def page_at(self, conversation_id: str, origin: str) -> None:
        """The conversation's chat page is served from ``origin`` (its socket said so): the
        links of its calls' URL questions point there (``meta["origin"]``, kept on record with
        the call, so a call resumed before any socket is back keeps its absolute links)."""
        if not origin:
            return
        self._origins.pop(conversation_id, None)
        self._origins[conversation_id] = origin
        while len(self._origins) > _ORIGINS_KEPT:
            self._origins.popitem(last=False)

    def _meta(
        self, conv: LiveConversation, on_record: dict[str, str] | None = None
    ) -> dict[str, str]:
        """A chat call's meta: its conversation, and the origin of its page (the latest
        socket's, else what the call kept on record)."""
        meta = {**(on_record or {}), "conversation_id": conv.id}
        if origin := self._origins.get(conv.id):
            meta["origin"] = origin
        return meta

    async def run(self, conv: LiveConversation, call: ToolCallRequest) -> ToolReply:
        """Run one tool call to its end; return the tool message for the model."""
        plugin = self.registry.get(call.name)
        if plugin is None:
            names = ", ".join(p.name for p in self.registry) or "(none)"
            return failed_reply(f"Unknown tool {call.name!r}. Available tools: {names}.")
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError as exc:
            return failed_reply(f"Arguments for tool {call.name!r} are not valid JSON: {exc}.")
        if not isinstance(arguments, dict):
            return failed_reply(f"Arguments for tool {call.name!r} must be a JSON object.")
        event = ToolCallEvent(call_id=call.id, tool_name=call.name, arguments=arguments)
        try:
            session = await self.manager.create(
                plugin.tool, arguments, call_id=call.id, meta=self._meta(conv)
            )
        except (InvalidToolParams, DuplicateSession) as exc:
            await self.sink(
                conv.id, event.model_copy(update={"status": "failed", "error": str(exc)})
            )
            return failed_reply(str(exc), type(exc).__name__)
        conv.calls.add(call.id)
        await self.sink(conv.id, event)
        return await self._drive(conv, plugin, session, event)

    async def resume(self, conv: LiveConversation, call: ResumableCall) -> ToolReply:
        """Resume a suspended call by replaying its journal (after a restart or a takeover)."""
        try:
            return await self._resume(conv, call)
        finally:
            conv.resumed(call.call_id)  # ended without showing a question (or showed it)

    async def _resume(self, conv: LiveConversation, call: ResumableCall) -> ToolReply:
        plugin = self.registry.get(call.tool_name)
        if plugin is None:
            return failed_reply(f"Unknown tool {call.tool_name!r}; the call cannot be resumed.")
        try:
            session = await self.manager.create(
                plugin.tool,
                call.arguments,
                call_id=call.call_id,
                journal=call.journal,
                meta=self._meta(conv, call.meta),
                abort_requested=call.abort_requested,
            )
        except (InvalidToolParams, DuplicateSession) as exc:
            return failed_reply(str(exc), type(exc).__name__)
        conv.calls.add(call.call_id)
        started = ToolCallEvent(
            call_id=call.call_id, tool_name=call.tool_name, arguments=call.arguments
        )
        return await self._drive(conv, plugin, session, started)

    async def _drive(
        self,
        conv: LiveConversation,
        plugin: Plugin,
        session: PluginSession,
        started: ToolCallEvent,
    ) -> ToolReply:
        """Run the call in this conversation to its end; the model's tool message."""
        return await drive(session, ChatHost(self, conv, plugin, session, started))


class ChatHost:
    """The browser chat as a ``Host`` (``chatbridge.calls.drive``) of one tool call: its
    questions become the chat's forms (or its approve/deny prompt), its logs and progress go
    on the call's card, and its end becomes the card's outcome and the model's tool message."""

    def __init__(
        self,
        runner: ToolCallRunner,
        conv: LiveConversation,
        plugin: Plugin,
        session: PluginSession,
        started: ToolCallEvent,
    ) -> None:
        self.runner, self.conv, self.plugin = runner, conv, plugin
        self.session, self.started = session, started

    async def question(self, request: ElicitRequest) -> Pause[ToolReply] | None:
        if request.key == APPROVAL_KEY:
            await self._approval(self.conv, self.session, request)
        else:
            await self._answer(self.conv, self.plugin, self.session, request)
        return None

    async def log(self, event: LogEvent) -> None:
        line = LogLine(
            call_id=self.session.call_id, level=event.level, message=event.message, data=event.data
        )
        await self.runner.sink(self.conv.id, line)

    async def progress(self, event: ProgressEvent) -> None:
        note = ProgressNote(
            call_id=self.session.call_id,
            message=event.message,
            progress=event.progress,
            total=event.total,
        )
        await self.runner.sink(self.conv.id, note)

    async def ended(self, event: EndEvent) -> ToolReply:
        session = self.session
        if isinstance(event, FailedEvent) and isinstance(event.exception, ClaimLost):
            raise event.exception  # handed over: the holder reports the call, not us
        outcome = session.outcome
        if outcome is None:  # parked, handed over (see PluginSession): it ends elsewhere
            raise ClaimLost(session.id, "", "")
        said = event.commitment.text() if event.commitment is not None else ""
        await self.runner.sink(
            self.conv.id, ended_call(self.started, outcome, session.aborted_by, said)
        )
        return ToolReply(tool_message(outcome, said), outcome)

    async def _approval(
        self, conv: LiveConversation, session: PluginSession, request: ElicitRequest
    ) -> None:
        """The call's approval question, shown as the chat's approve/deny prompt."""
        call_id, arguments = session.call_id, session.params.model_dump(mode="json")
        decision: asyncio.Future[tuple[bool, str]] = asyncio.get_running_loop().create_future()
        conv.approvals[call_id] = PendingApproval(call_id, session.tool_name, arguments, decision)
        conv.resumed(call_id)  # a decision sent while the call was being resumed goes in now
        prompt = ApprovalRequest(call_id=call_id, tool_name=session.tool_name, arguments=arguments)
        await self.runner.sink(conv.id, prompt)
        await self.runner.set_phase(conv, conv.waiting_phase())
        ended = asyncio.create_task(session.wait_finished())
        try:
            waits: set[asyncio.Future[Any]] = {decision, ended}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if decision.done():
                approved, reason = decision.result()
                answer = {"approve": approved, "reason": reason}
                await session.respond_to_elicit(request.id, Accept(answer))
        finally:
            ended.cancel()
            conv.approvals.pop(call_id, None)
            await self.runner.set_phase(conv, conv.waiting_phase())

    async def _answer(
        self,
        conv: LiveConversation,
        plugin: Plugin,
        session: PluginSession,
        request: ElicitRequest,
    ) -> None:
        """Run the plugin's handler for ``request`` until it answers or the session ends."""
        pending = PendingElicit(session, str(request.id))
        conv.pending[request.call_id] = pending
        await self.runner.set_phase(conv, conv.waiting_phase())
        await self.runner.sink(
            conv.id,
            ElicitStart(
                session_id=session.id,
                call_id=request.call_id,
                elicit_id=str(request.id),
                key=request.key,
                message=request.message,
            ),
        )

        surface = FormSurface(
            request, session.id, pending, self.runner.render_form, self._sink_for(conv)
        )
        ctx = PluginContext(request, surface, session.answers_for(request.id))
        handler = asyncio.create_task(self._handle(plugin, session, request, ctx))
        ended = asyncio.create_task(session.wait_finished())
        closed = asyncio.create_task(session.question_closed(request.id))
        try:
            await asyncio.wait({handler, ended, closed}, return_when=asyncio.FIRST_COMPLETED)
            if session.refused_too_often(request.id) is not None:
                # Its answers were refused as often as it takes: the call fails and its card
                # says so. The form raised TooManyRefusedAnswers (or is about to): retrieved.
                await asyncio.wait({handler, ended}, return_when=asyncio.FIRST_COMPLETED)
                if handler.done() and not handler.cancelled():
                    handler.exception()
                return
            if not handler.done():
                if closed.done() and not ended.done():  # answered on its page, or expired
                    await self.runner.sink(conv.id, self._closed(session, request))
                return  # else aborted while the form was open
            try:
                result = handler.result()
            except TooManyRefusedAnswers:  # (raised by the form) the call fails, saying why
                return
            except ElicitNotPending:  # a URL question's page answered first: that answer counts
                await asyncio.wait({ended, closed}, return_when=asyncio.FIRST_COMPLETED)
                if closed.done() and not ended.done():
                    await self.runner.sink(conv.id, self._closed(session, request))
                return
            except Exception as exc:  # a plugin bug: stop the tool, tell the model
                logger.exception("handler for %s failed", request.id)
                await session.abort(f"the {request.key!r} form failed: {exc}")
                return
            data = result_to_dict(result)
            await self.runner.sink(
                conv.id,
                ElicitComplete(
                    call_id=request.call_id,
                    elicit_id=str(request.id),
                    action=data["action"],
                    content=data.get("content"),
                ),
            )
        finally:
            for task in (handler, ended, closed):
                task.cancel()
            conv.pending.pop(request.call_id, None)
            await self.runner.set_phase(conv, conv.waiting_phase())

    @staticmethod
    async def _handle(
        plugin: Plugin, session: PluginSession, request: ElicitRequest, ctx: PluginContext
    ) -> ElicitResult[Any]:
        """The form's handler, then its answer to the question, in the one task the form's
        post woke: the post settles the question there, and the tool resumes next."""
        # A URL question shows its link whatever the key's handler (its page answers it).
        if request.mode == "url":
            result = await url_card(request, ctx)
        else:
            result = await plugin.handle(request, ctx)
        await session.respond_to_elicit(request.id, result)
        return result

    @staticmethod
    def _closed(session: PluginSession, request: ElicitRequest) -> ElicitComplete:
        """How a question closed without its form: a URL question's page answered it, it was
        left to change an earlier answer, or nobody answered in time."""
        changed = session.changed_from(str(request.id))
        if changed is not None:
            return ElicitComplete(
                call_id=request.call_id,
                elicit_id=str(request.id),
                action="change",
                note=changed.label,
            )
        answer = session.answer_of(request.id)
        if answer is not None and answer.accepted:
            return ElicitComplete(
                call_id=request.call_id,
                elicit_id=str(request.id),
                action="accept",
                note=_("completed on its page"),
            )
        return ElicitComplete(
            call_id=request.call_id,
            elicit_id=str(request.id),
            action="cancel",
            note=_("expired: no answer in time"),
        )

    def _sink_for(self, conv: LiveConversation) -> Callable[[ChatEvent], Awaitable[None]]:
        async def send(event: ChatEvent) -> None:
            if isinstance(event, ElicitForm):  # shown, its post awaited: answers go straight in
                conv.resumed(event.call_id)
            await self.runner.sink(conv.id, event)

        return send


async def change_answer(session: PluginSession, elicit_id: str, target: str) -> None:
    """The chat's Change button: from the open question ``elicit_id``, ask ``target`` again
    (``PluginSession.change``); a refusal says why, in the person's words."""
    try:
        await session.change(elicit_id, target)
    except ChangeRefused as refused:
        raise CommandRefused("CHANGE_REFUSED", str(refused)) from None
    except ElicitNotPending:
        raise CommandRefused("NOT_WAITING", _(NOT_OPEN_TO_CHANGE)) from None
    except (JournalWriteFailed, ClaimLost):  # not on record: the call stopped there
        raise CommandRefused("UNAVAILABLE", _(CHANGE_NOT_RECORDED)) from None


class FormRenderer(Protocol):
    """Turns a plugin template and its context into the HTML of an elicitation card."""

    def __call__(
        self,
        request: ElicitRequest,
        template_name: str,
        context: dict[str, Any],
        errors: FieldErrors,
        *,
        session_id: str,
    ) -> str: ...


class FormSurface:
    """``RenderSurface`` for conversations: publishes the form, waits for its post."""

    def __init__(
        self,
        request: ElicitRequest,
        session_id: str,
        pending: PendingElicit,
        render: FormRenderer,
        send: Callable[[ChatEvent], Awaitable[None]],
    ) -> None:
        self._request, self._session_id = request, session_id
        self._pending, self._render, self._send = pending, render, send
        self._attempt = 0

    async def show(
        self, template_name: str, context: dict[str, Any], errors: FieldErrors
    ) -> FormPost:
        request = self._request
        self._attempt += 1
        html = self._render(request, template_name, context, errors, session_id=self._session_id)
        form = ElicitForm(
            session_id=self._session_id,
            call_id=request.call_id,
            elicit_id=str(request.id),
            tool_name=request.tool_name,
            key=request.key,
            message=request.message,
            requested_schema=request.schema.json,
            context=request.context,
            errors=errors,
            attempt=self._attempt,
            html=html,
            mode=request.mode,
            url=request.url,
            exits=offered(request.exits, request.changes),
        )
        waiter: asyncio.Future[FormPost] = asyncio.get_running_loop().create_future()
        question = self._pending.session.question
        if question is not None and question.id == form.elicit_id:
            question.shown = form  # the question keeps what was shown for it
        self._pending.waiter = waiter
        await self._send(form)
        try:
            return await waiter
        finally:
            self._pending.waiter = None
