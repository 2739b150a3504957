"""Running one tool call in a conversation: approval, session, questions, result."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from chatbridge.core.approval import APPROVAL_KEY, DENIED_BY
from chatbridge.core.completion import ToolCallRequest
from chatbridge.core.conversation import (
    EventSink,
    LiveConversation,
    PendingApproval,
    PendingElicit,
    ResumableCall,
)
from chatbridge.core.elicit import Accept, ElicitRequest, result_to_dict
from chatbridge.core.exceptions import (
    ClaimLost,
    DuplicateSession,
    ElicitNotPending,
    InvalidToolParams,
)
from chatbridge.core.forms import FormRenderer, FormSurface
from chatbridge.core.manager import SessionManager
from chatbridge.core.plugins import Plugin, PluginContext, PluginRegistry
from chatbridge.core.protocol import (
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
from chatbridge.core.sessions import PluginSession

__all__ = [
    "DENIED_PREFIX",
    "NOT_QUOTED",
    "OPERATOR_PREFIX",
    "USER_STOPPED_PREFIX",
    "ToolCallRunner",
    "stopped_message",
]

# How the tool message tells the model that a person ended the call on purpose (DESIGN §5):
# said as it happened, so no model apologises for an error or starts the call again.
USER_STOPPED_PREFIX = "Stopped by the user:"
DENIED_PREFIX = "Denied by the user:"
OPERATOR_PREFIX = "Stopped by an operator:"
USER_ABORT = "user"  # ``PluginSession.aborted_by`` of the chat's Abort
# The exception's text is for logs and the admin: a model is asked not to quote it to people.
NOT_QUOTED = " (Tell the user in plain words that it did not work; do not quote this error.)"
_DEFAULT_REASONS = ("aborted by the user", "denied by the user", "denied by the user.")


def _reason(reason: str, *prefixes: str) -> str:
    for prefix in prefixes:
        if reason.lower().startswith(prefix.lower()):
            reason = reason[len(prefix) :]
    reason = reason.strip(" :.")
    return "" if reason.lower() in _DEFAULT_REASONS else reason


def stopped_message(by: str, reason: str) -> str:
    """The tool message for a call a person ended: the user's own Abort, their denial, or an
    operator's abort (never to be undone by the model); any other abort is an error."""
    if by == USER_ABORT:
        why = _reason(reason)
        return (
            f"{USER_STOPPED_PREFIX} the user stopped this tool call themselves"
            + (f" (their reason: {why})" if why else "")
            + ". Do not retry unless they ask."
        )
    if by == DENIED_BY:
        why = _reason(reason, "Denied by the user")
        return (
            f"{DENIED_PREFIX} the user did not allow this tool call"
            + (f" (their reason: {why})" if why else "")
            + ". Do not retry unless they ask."
        )
    if by.startswith("operator"):
        why = _reason(reason, f"Aborted by {by}")
        return (
            f"{OPERATOR_PREFIX} an operator ended this tool call on purpose"
            + (f" (their reason: {why})" if why else "")
            + ". Do not retry it; tell the user it was stopped."
        )
    return f"Error: The tool call was aborted: {reason}"


logger = logging.getLogger("chatbridge.engine")


def _with_note(message: str, said: str) -> str:
    """The tool message with what became of a committed call (the model tells the user)."""
    return f"{message}\n\n{said}" if said else message


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

    async def run(self, conv: LiveConversation, call: ToolCallRequest) -> str:
        """Run one tool call to its end; return the tool message for the model."""
        plugin = self.registry.get(call.name)
        if plugin is None:
            names = ", ".join(p.name for p in self.registry) or "(none)"
            return f"Error: Unknown tool {call.name!r}. Available tools: {names}."
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError as exc:
            return f"Error: Arguments for tool {call.name!r} are not valid JSON: {exc}."
        if not isinstance(arguments, dict):
            return f"Error: Arguments for tool {call.name!r} must be a JSON object."
        event = ToolCallEvent(call_id=call.id, tool_name=call.name, arguments=arguments)
        try:
            session = await self.manager.create(
                plugin.tool, arguments, call_id=call.id, meta={"conversation_id": conv.id}
            )
        except (InvalidToolParams, DuplicateSession) as exc:
            await self.sink(
                conv.id, event.model_copy(update={"status": "failed", "error": str(exc)})
            )
            return f"Error: {exc}"
        conv.calls.add(call.id)
        await self.sink(conv.id, event)
        return await self._drive(conv, plugin, session, event)

    async def resume(self, conv: LiveConversation, call: ResumableCall) -> str:
        """Resume a suspended call by replaying its journal (after a restart or a takeover)."""
        try:
            return await self._resume(conv, call)
        finally:
            conv.resumed(call.call_id)  # ended without showing a question (or showed it)

    async def _resume(self, conv: LiveConversation, call: ResumableCall) -> str:
        plugin = self.registry.get(call.tool_name)
        if plugin is None:
            return f"Error: Unknown tool {call.tool_name!r}; the call cannot be resumed."
        try:
            session = await self.manager.create(
                plugin.tool,
                call.arguments,
                call_id=call.call_id,
                journal=call.journal,
                meta={"conversation_id": conv.id},
                abort_requested=call.abort_requested,
            )
        except (InvalidToolParams, DuplicateSession) as exc:
            return f"Error: {exc}"
        conv.calls.add(call.call_id)
        started = ToolCallEvent(
            call_id=call.call_id, tool_name=call.tool_name, arguments=call.arguments
        )
        return await self._drive(conv, plugin, session, started)

    async def _approval(
        self, conv: LiveConversation, session: PluginSession, request: ElicitRequest
    ) -> None:
        """The call's approval question, shown as the chat's approve/deny prompt."""
        call_id, arguments = session.call_id, session.params.model_dump(mode="json")
        decision: asyncio.Future[tuple[bool, str]] = asyncio.get_running_loop().create_future()
        conv.approvals[call_id] = PendingApproval(call_id, session.tool_name, arguments, decision)
        conv.resumed(call_id)  # a decision sent while the call was being resumed goes in now
        prompt = ApprovalRequest(call_id=call_id, tool_name=session.tool_name, arguments=arguments)
        await self.sink(conv.id, prompt)
        await self.set_phase(conv, conv.waiting_phase())
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
            await self.set_phase(conv, conv.waiting_phase())

    async def _drive(
        self,
        conv: LiveConversation,
        plugin: Plugin,
        session: PluginSession,
        started: ToolCallEvent,
    ) -> str:
        call_id = session.call_id
        while True:
            event = await session.next_event()
            if event.type == "log":
                await self.sink(
                    conv.id,
                    LogLine(
                        call_id=call_id, level=event.level, message=event.message, data=event.data
                    ),
                )
            elif event.type == "progress":
                await self.sink(
                    conv.id,
                    ProgressNote(
                        call_id=call_id,
                        message=event.message,
                        progress=event.progress,
                        total=event.total,
                    ),
                )
            elif event.type == "elicit" and event.request.key == APPROVAL_KEY:
                await self._approval(conv, session, event.request)
            elif event.type == "elicit":
                await self._answer(conv, plugin, session, event.request)
            elif event.type == "completed":
                said = event.commitment.text() if event.commitment is not None else ""
                done = {"status": "completed", "result": event.result, "commitment": said}
                await self.sink(conv.id, started.model_copy(update=done))
                return _with_note(json.dumps(event.result, ensure_ascii=False), said)
            elif event.type == "failed":
                if isinstance(event.exception, ClaimLost):
                    raise event.exception  # handed over: the holder reports the call, not us
                said = event.commitment.text() if event.commitment is not None else ""
                failed = {"status": "failed", "error": event.error, "commitment": said}
                await self.sink(conv.id, started.model_copy(update=failed))
                return _with_note(f"Error: The tool failed: {event.error}{NOT_QUOTED}", said)
            elif session.parked:  # handed over (see PluginSession): it ends elsewhere, later
                raise ClaimLost(session.id, "", "")
            elif session.aborted_by == DENIED_BY:
                denied = {"status": "denied", "error": event.reason}
                await self.sink(conv.id, started.model_copy(update=denied))
                return stopped_message(DENIED_BY, event.reason)
            else:
                by = session.aborted_by or ""
                said = event.commitment.text() if event.commitment is not None else ""
                aborted = {
                    "status": "aborted",
                    "error": event.reason,
                    "aborted_by": by,
                    "commitment": said,
                }
                await self.sink(conv.id, started.model_copy(update=aborted))
                return _with_note(stopped_message(by, event.reason), said)

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
        await self.set_phase(conv, conv.waiting_phase())
        await self.sink(
            conv.id,
            ElicitStart(
                session_id=session.id,
                call_id=request.call_id,
                elicit_id=str(request.id),
                key=request.key,
                message=request.message,
            ),
        )

        async def rejected(data: dict[str, Any], errors: dict[str, list[str]]) -> None:
            await session.refused(str(request.id), data, errors)  # the session keeps count

        surface = FormSurface(
            request, session.id, pending, self.render_form, self._sink_for(conv), rejected
        )
        handler = asyncio.create_task(plugin.handle(request, PluginContext(request, surface)))
        ended = asyncio.create_task(session.wait_finished())
        closed = asyncio.create_task(session.question_closed(request.id))
        try:
            await asyncio.wait({handler, ended, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not handler.done():
                if closed.done() and not ended.done():  # answered on its page, or expired
                    await self.sink(conv.id, self._closed(session, request))
                return  # else aborted while the form was open
            try:
                result = handler.result()
                await session.respond_to_elicit(request.id, result)
            except ElicitNotPending:  # a URL question's page answered first: that answer counts
                await asyncio.wait({ended, closed}, return_when=asyncio.FIRST_COMPLETED)
                if closed.done() and not ended.done():
                    await self.sink(conv.id, self._closed(session, request))
                return
            except Exception as exc:  # a plugin bug: stop the tool, tell the model
                logger.exception("handler for %s failed", request.id)
                await session.abort(f"the {request.key!r} form failed: {exc}")
                return
            data = result_to_dict(result)
            await self.sink(
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
            await self.set_phase(conv, conv.waiting_phase())

    @staticmethod
    def _closed(session: PluginSession, request: ElicitRequest) -> ElicitComplete:
        """How a question closed without its form: a URL question's page answered it, or
        nobody answered in time."""
        last = session.last_answer
        if last is not None and last[0] == str(request.id) and last[1].accepted:
            return ElicitComplete(
                call_id=request.call_id,
                elicit_id=str(request.id),
                action="accept",
                note="completed on its page",
            )
        return ElicitComplete(
            call_id=request.call_id,
            elicit_id=str(request.id),
            action="cancel",
            note="expired: no answer in time",
        )

    def _sink_for(self, conv: LiveConversation) -> Callable[[ChatEvent], Awaitable[None]]:
        async def send(event: ChatEvent) -> None:
            if isinstance(event, ElicitForm):  # shown, its post awaited: answers go straight in
                conv.resumed(event.call_id)
            await self.sink(conv.id, event)

        return send
