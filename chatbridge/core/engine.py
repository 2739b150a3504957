"""The chat engine: one run per user turn, as an explicit state machine (DESIGN §3).

``ChatHub`` is process-wide and owns every conversation's runtime state: the running turn (a
task that outlives any socket), the current phase and the questions waiting for an answer.
Sockets come and go; they send commands to the hub and receive events through the sink.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from chatbridge.core.completion import Completion, ToolCallRequest, stream_completion
from chatbridge.core.elicit import ElicitRequest, result_to_dict
from chatbridge.core.exceptions import ChatBridgeError, DuplicateSession, InvalidToolParams
from chatbridge.core.forms import FormRenderer, FormSurface, PendingElicit
from chatbridge.core.observer import observe
from chatbridge.core.plugins import FormPost, Plugin, PluginContext, PluginRegistry
from chatbridge.core.protocol import (
    ApprovalRequest,
    AssistantDelta,
    AssistantMessage,
    ChatEvent,
    ConversationState,
    ElicitComplete,
    ElicitResponseAck,
    ElicitResponseCommand,
    ElicitStart,
    ErrorEvent,
    LogLine,
    Phase,
    ProgressNote,
    SessionError,
    ToolCallEvent,
    UserMessage,
)
from chatbridge.core.sessions import PluginSession, SessionManager

__all__ = ["LOST_SESSION_MESSAGE", "ChatHub", "CommandRefused", "ConversationStore"]

logger = logging.getLogger("chatbridge.engine")

LOST_SESSION_MESSAGE = "Error: Plugin session was lost. Please retry the operation."
EventSink = Callable[[str, ChatEvent], Awaitable[None]]


class CommandRefused(ChatBridgeError):
    """A command cannot be carried out; ``code`` is machine-readable."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


class ConversationStore(Protocol):
    """Where a conversation's messages (OpenAI format) and phase are kept."""

    async def messages(self, conversation_id: str) -> list[dict[str, Any]]: ...

    async def append(
        self, conversation_id: str, message_id: str, message: dict[str, Any]
    ) -> None: ...

    async def save_phase(self, conversation_id: str, phase: Phase) -> None: ...


@dataclass
class _Conversation:
    id: str
    phase: Phase = "idle"
    turn: asyncio.Task[None] | None = None
    pending: dict[str, PendingElicit] = field(default_factory=dict)  # call id → open question
    approvals: dict[str, PendingApproval] = field(default_factory=dict)  # call id → approval
    calls: set[str] = field(default_factory=set)  # tool calls this process ran

    def waiting_phase(self) -> Phase:
        if self.pending:
            return "plugin_awaiting_elicit"
        return "awaiting_approval" if self.approvals else "executing_tools"

    @property
    def running(self) -> bool:
        return self.turn is not None and not self.turn.done()


@dataclass
class PendingApproval:
    """A tool call waiting for the user's approve/deny."""

    call_id: str
    tool_name: str
    arguments: dict[str, Any]
    decision: asyncio.Future[tuple[bool, str]]


def dangling_calls(messages: list[dict[str, Any]]) -> list[str]:
    """Ids of assistant tool calls that have no tool message answering them."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    return [
        str(call["id"])
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or ()
        if call.get("id") not in answered
    ]


class ChatHub:
    """Runs turns for every conversation of the process and routes commands to them."""

    def __init__(
        self,
        *,
        registry: PluginRegistry,
        manager: SessionManager,
        store: ConversationStore,
        sink: EventSink,
        render_form: FormRenderer,
        model: str,
        max_iterations: int = 8,
    ) -> None:
        self.registry, self.manager, self.store = registry, manager, store
        self.sink, self.render_form, self.model = sink, render_form, model
        self.max_iterations = max_iterations
        self._conversations: dict[str, _Conversation] = {}

    # -- commands ---------------------------------------------------------------------------

    async def user_message(self, conversation_id: str, text: str) -> None:
        """Start a turn for ``text``; refused while a turn is running."""
        conv = self._conversation(conversation_id)
        if conv.running:
            raise CommandRefused(
                "BUSY", "Please wait for the current reply, or abort the running tool."
            )
        self._start(conv, lost=[], text=text)  # at once: a second message now sees BUSY

    async def elicit_response(self, conversation_id: str, cmd: ElicitResponseCommand) -> None:
        """Deliver an answer to the form waiting for it (or handle a lost session)."""
        conv = self._conversation(conversation_id)
        pending = conv.pending.get(cmd.call_id)
        if pending is None:
            await self._unmatched_response(conv, cmd)
            return
        if (pending.session_id, pending.elicit_id) != (cmd.session_id, cmd.elicit_id):
            raise CommandRefused(
                "STALE_ELICIT",
                f"This form is out of date: the question now open is {pending.elicit_id}.",
            )
        if not pending.deliver(FormPost(cmd.action, dict(cmd.content))):
            raise CommandRefused("NOT_WAITING", "This question is not waiting for an answer.")
        await self.sink(
            conv.id,
            ElicitResponseAck(call_id=cmd.call_id, elicit_id=cmd.elicit_id, action=cmd.action),
        )

    async def abort(self, conversation_id: str, session_id: str, reason: str) -> None:
        """Abort a tool session of this conversation."""
        conv = self._conversation(conversation_id)
        if session_id not in conv.calls or self.manager.get(session_id) is None:
            raise CommandRefused(
                "NOT_FOUND", f"No running tool {session_id!r} in this conversation."
            )
        await self.manager.abort(session_id, reason, by="user")

    async def decide(
        self, conversation_id: str, call_id: str, approved: bool, reason: str = ""
    ) -> None:
        """Approve or deny a tool call waiting for approval."""
        conv = self._conversation(conversation_id)
        approval = conv.approvals.get(call_id)
        if approval is None or approval.decision.done():
            raise CommandRefused("NOT_FOUND", f"Nothing is waiting for approval as {call_id!r}.")
        approval.decision.set_result((approved, reason.strip()))

    def state(self, conversation_id: str) -> ConversationState:
        conv = self._conversation(conversation_id)
        return ConversationState(
            conversation_id=conv.id,
            phase=conv.phase,
            running=conv.running,
            pending=list(conv.pending),
            approvals=[
                ApprovalRequest(call_id=a.call_id, tool_name=a.tool_name, arguments=a.arguments)
                for a in conv.approvals.values()
            ],
        )

    def pending_forms(self, conversation_id: str) -> list[Any]:
        """The forms open right now, for a socket that (re)connects."""
        conv = self._conversations.get(conversation_id)
        return [p.form for p in conv.pending.values() if p.form is not None] if conv else []

    def owns_call(self, conversation_id: str, call_id: str) -> bool:
        conv = self._conversations.get(conversation_id)
        return conv is not None and call_id in conv.calls

    async def close(self) -> None:
        """Stop every turn without recording anything (process shutdown)."""
        turns = [c.turn for c in self._conversations.values() if c.turn is not None]
        for turn in turns:
            turn.cancel()
        if turns:
            await asyncio.wait(turns)
        self._conversations.clear()

    async def wait_idle(self, conversation_id: str) -> None:
        """Wait for the running turn (tests and shutdown)."""
        conv = self._conversations.get(conversation_id)
        if conv is not None and conv.turn is not None:
            await asyncio.wait({conv.turn})

    # -- the turn ---------------------------------------------------------------------------

    def _conversation(self, conversation_id: str) -> _Conversation:
        conv = self._conversations.get(conversation_id)
        if conv is None:
            conv = self._conversations[conversation_id] = _Conversation(conversation_id)
        return conv

    def _start(
        self, conv: _Conversation, lost: list[ElicitResponseCommand], text: str | None = None
    ) -> None:
        conv.turn = asyncio.create_task(
            self._turn(conv, lost, text), name=f"chatbridge-turn:{conv.id}"
        )

    async def _phase(self, conv: _Conversation, phase: Phase) -> None:
        conv.phase = phase
        await self.store.save_phase(conv.id, phase)
        await self.sink(conv.id, self.state(conv.id))

    async def _unmatched_response(self, conv: _Conversation, cmd: ElicitResponseCommand) -> None:
        if self.manager.get(cmd.session_id) is not None and cmd.session_id in conv.calls:
            raise CommandRefused("NOT_WAITING", "This question is not waiting for an answer.")
        if cmd.call_id not in dangling_calls(await self.store.messages(conv.id)):
            raise CommandRefused("NOT_FOUND", f"No tool call {cmd.call_id!r} in this conversation.")
        if conv.running:
            raise CommandRefused("BUSY", "Please wait for the current reply.")
        self._start(conv, lost=[cmd])

    async def _turn(
        self, conv: _Conversation, lost: list[ElicitResponseCommand], text: str | None
    ) -> None:
        try:
            if text is not None:
                message_id = uuid.uuid4().hex
                await self.store.append(conv.id, message_id, {"role": "user", "content": text})
                await self.sink(conv.id, UserMessage(message_id=message_id, content=text))
            await self._phase(conv, "process_plugin_abort")
            await self._phase(conv, "process_plugin_responses")
            await self._recover_lost(conv, {c.call_id: c.session_id for c in lost})
            for _ in range(self.max_iterations):
                await self._phase(conv, "start_iteration")
                messages = await self.store.messages(conv.id)
                await self._phase(conv, "streaming")
                reply = await self._stream_reply(conv, messages)
                if reply is None or not reply.tool_calls:
                    break
                await self._phase(conv, "executing_tools")
                # All calls of a reply run at once: their questions and approvals show together.
                outcomes = await asyncio.gather(
                    *(self.execute_tool_call(conv.id, call) for call in reply.tool_calls),
                    return_exceptions=True,
                )
                for call, outcome in zip(reply.tool_calls, outcomes, strict=True):
                    if isinstance(outcome, BaseException):
                        logger.error("tool call %s failed", call.id, exc_info=outcome)
                        outcome = f"Error: The tool call failed inside the server: {outcome!r}"
                    await self.store.append(
                        conv.id,
                        uuid.uuid4().hex,
                        {"role": "tool", "tool_call_id": call.id, "content": outcome},
                    )
        except Exception:  # a bug in a turn must not take the conversation down
            logger.exception("turn of conversation %s failed", conv.id)
            failed = ErrorEvent(code="INTERNAL_ERROR", message="The reply failed; please retry.")
            with contextlib.suppress(Exception):  # the sink itself may be what failed
                await self.sink(conv.id, failed)
        finally:
            conv.turn = None
        with contextlib.suppress(Exception):
            await self._phase(conv, "done")
        if conv.turn is None and not conv.pending and not conv.approvals:  # nothing to remember
            self._conversations.pop(conv.id, None)

    async def _recover_lost(self, conv: _Conversation, sessions: dict[str, str]) -> None:
        """Answer every tool call left without a result by a lost session (DESIGN §2)."""
        for call_id in dangling_calls(await self.store.messages(conv.id)):
            if self.manager.get(call_id) is not None:
                continue
            await self.sink(
                conv.id,
                SessionError(
                    session_id=sessions.get(call_id, call_id),
                    call_id=call_id,
                    error="SESSION_NOT_FOUND",
                    message="The tool session was lost (for example in a restart).",
                ),
            )
            await self.store.append(
                conv.id,
                uuid.uuid4().hex,
                {"role": "tool", "tool_call_id": call_id, "content": LOST_SESSION_MESSAGE},
            )

    async def _stream_reply(
        self, conv: _Conversation, messages: list[dict[str, Any]]
    ) -> Completion | None:
        message_id = uuid.uuid4().hex
        reply = Completion()
        tools = [p.tool.function_spec() for p in self.registry]
        try:
            async for delta in stream_completion(self.model, messages, tools, reply):
                await self.sink(conv.id, AssistantDelta(message_id=message_id, delta=delta))
        except Exception as exc:  # provider errors come in many types
            logger.warning("model %s failed: %s", self.model, exc)
            await self.sink(
                conv.id, ErrorEvent(code="LLM_ERROR", message=f"The model failed: {exc}")
            )
            return None
        reply.tool_calls = [self._unique(conv, call) for call in reply.tool_calls]
        await self.store.append(conv.id, message_id, reply.to_message())
        if reply.text:
            await self.sink(conv.id, AssistantMessage(message_id=message_id, content=reply.text))
        return reply

    def _unique(self, conv: _Conversation, call: ToolCallRequest) -> ToolCallRequest:
        """The call with an id no live session uses: providers may omit or reuse ids."""
        if call.id and call.id not in conv.calls and self.manager.get(call.id) is None:
            return call
        return ToolCallRequest(f"call_{uuid.uuid4().hex[:24]}", call.name, call.arguments)

    async def execute_tool_call(self, conversation_id: str, call: ToolCallRequest) -> str:
        """Run one tool call to its end; return the tool message for the model."""
        conv = self._conversation(conversation_id)
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
        if plugin.tool.needs_approval:
            approved, reason = await self._approval(conv, call.id, call.name, arguments)
            if not approved:
                why = f": {reason}" if reason else "."
                await self.sink(
                    conv.id,
                    event.model_copy(
                        update={"status": "denied", "error": f"Denied by the user{why}"}
                    ),
                )
                return f"Error: The user denied this tool call{why}"
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

    async def _approval(
        self, conv: _Conversation, call_id: str, tool_name: str, arguments: dict[str, Any]
    ) -> tuple[bool, str]:
        decision: asyncio.Future[tuple[bool, str]] = asyncio.get_running_loop().create_future()
        conv.approvals[call_id] = PendingApproval(call_id, tool_name, arguments, decision)
        request = ApprovalRequest(call_id=call_id, tool_name=tool_name, arguments=arguments)
        await self.sink(conv.id, request)
        await self._phase(conv, conv.waiting_phase())
        try:
            return await decision
        finally:
            conv.approvals.pop(call_id, None)
            await self._phase(conv, conv.waiting_phase())

    async def _drive(
        self, conv: _Conversation, plugin: Plugin, session: PluginSession, started: ToolCallEvent
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
            elif event.type == "elicit":
                await self._answer(conv, plugin, session, event.request)
            elif event.type == "completed":
                await self.sink(
                    conv.id,
                    started.model_copy(update={"status": "completed", "result": event.result}),
                )
                return json.dumps(event.result, ensure_ascii=False)
            elif event.type == "failed":
                await self.sink(
                    conv.id, started.model_copy(update={"status": "failed", "error": event.error})
                )
                return f"Error: The tool failed: {event.error}"
            else:
                await self.sink(
                    conv.id, started.model_copy(update={"status": "aborted", "error": event.reason})
                )
                return f"Error: The tool call was aborted: {event.reason}"

    async def _answer(
        self, conv: _Conversation, plugin: Plugin, session: PluginSession, request: ElicitRequest
    ) -> None:
        """Run the plugin's handler for ``request`` until it answers or the session ends."""
        pending = PendingElicit.for_request(request, session.id)
        conv.pending[request.call_id] = pending
        await self._phase(conv, conv.waiting_phase())
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
            await observe(
                session.observer, "answer_rejected", session, str(request.id), data, errors
            )

        surface = FormSurface(
            request, session.id, pending, self.render_form, self._sink_for(conv), rejected
        )
        handler = asyncio.create_task(plugin.handle(request, PluginContext(request, surface)))
        ended = asyncio.create_task(session.wait_finished())
        try:
            await asyncio.wait({handler, ended}, return_when=asyncio.FIRST_COMPLETED)
            if not handler.done():  # aborted or expired while the form was open
                return
            try:
                result = handler.result()
                await session.respond_to_elicit(request.id, result)
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
            for task in (handler, ended):
                task.cancel()
            conv.pending.pop(request.call_id, None)
            await self._phase(conv, conv.waiting_phase())

    def _sink_for(self, conv: _Conversation) -> Callable[[ChatEvent], Awaitable[None]]:
        async def send(event: ChatEvent) -> None:
            await self.sink(conv.id, event)

        return send
