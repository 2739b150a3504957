"""The chat engine: one run per user turn, as an explicit state machine (DESIGN §3).

``ChatHub`` is process-wide and owns every conversation's runtime state: the running turn (a
task that outlives any socket), the current phase and the questions waiting for an answer.
Sockets come and go; they send commands to the hub and receive events through the sink.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from chatbridge.core.completion import Completion, ToolCallRequest, stream_completion
from chatbridge.core.conversation import (
    LOST_SESSION_MESSAGE,
    CommandRefused,
    ConversationRuntime,
    ConversationStore,
    EventSink,
    ResumableCall,
    dangling_calls,
)
from chatbridge.core.forms import FormRenderer
from chatbridge.core.plugins import FormPost, PluginRegistry
from chatbridge.core.protocol import (
    ApprovalRequest,
    AssistantDelta,
    AssistantMessage,
    ConversationState,
    ElicitResponseAck,
    ElicitResponseCommand,
    ErrorEvent,
    Phase,
    SessionError,
    UserMessage,
)
from chatbridge.core.sessions import SessionManager
from chatbridge.core.tool_calls import ToolCallRunner

__all__ = [
    "LOST_SESSION_MESSAGE",
    "ChatHub",
    "CommandRefused",
    "ConversationStore",
    "dangling_calls",
]

logger = logging.getLogger("chatbridge.engine")


def _own_id(call: ToolCallRequest) -> ToolCallRequest:
    """The call with an id of our own. A call id is a session id across every worker and the
    database, and providers may omit ids, reuse them or number them per reply."""
    return ToolCallRequest(f"call_{uuid.uuid4().hex[:24]}", call.name, call.arguments)


class Peers(Protocol):
    """Other worker processes (scale-out): are they alive, and hand them an answer."""

    async def alive(self, worker: str) -> bool: ...

    async def route(
        self, worker: str, conversation_id: str, command: ElicitResponseCommand
    ) -> dict[str, Any] | None: ...


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
        peers: Peers | None = None,
    ) -> None:
        self.registry, self.manager, self.store = registry, manager, store
        self.sink, self.render_form, self.model = sink, render_form, model
        self.max_iterations = max_iterations
        self.peers = peers  # the other workers, when there are several
        self.runner = ToolCallRunner(
            registry=registry,
            manager=manager,
            sink=sink,
            render_form=render_form,
            set_phase=self._phase,
        )
        self._conversations: dict[str, ConversationRuntime] = {}

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
        if cmd.session_id != cmd.call_id:
            raise CommandRefused(
                "BAD_COMMAND",
                f"This answer names session {cmd.session_id!r} and call {cmd.call_id!r}: a tool "
                "session's id is its call id, so send the call_id of the form as both.",
            )
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

    async def close(self) -> None:
        """Stop every turn without recording anything (process shutdown)."""
        turns = [c.turn for c in self._conversations.values() if c.turn is not None]
        for turn in turns:
            turn.cancel()
        for conv in self._conversations.values():
            for call_id in list(conv.resuming):
                conv.resumed(call_id)
        if turns:
            await asyncio.wait(turns)
        self._conversations.clear()

    async def wait_idle(self, conversation_id: str) -> None:
        """Wait for the running turn (tests and shutdown)."""
        conv = self._conversations.get(conversation_id)
        if conv is not None and conv.turn is not None:
            await asyncio.wait({conv.turn})

    # -- the turn ---------------------------------------------------------------------------

    def _conversation(self, conversation_id: str) -> ConversationRuntime:
        conv = self._conversations.get(conversation_id)
        if conv is None:
            conv = self._conversations[conversation_id] = ConversationRuntime(conversation_id)
        return conv

    def _start(
        self,
        conv: ConversationRuntime,
        lost: list[ElicitResponseCommand],
        text: str | None = None,
        resume: Sequence[ResumableCall] = (),
    ) -> None:
        conv.turn = asyncio.create_task(
            self._turn(conv, lost, text, resume), name=f"chatbridge-turn:{conv.id}"
        )

    async def recover(self, conversation_id: str) -> bool:
        """Resume the conversation's suspended calls that no live worker holds (by replay)."""
        conv = self._conversation(conversation_id)
        if conv.running:
            return False
        claimed = await self._claim(conv)
        if claimed and not conv.running:
            for call in claimed:  # before the turn runs: answers arriving now wait for the form
                conv.resuming[call.call_id] = asyncio.Event()
            self._start(conv, lost=[], resume=claimed)
            return True
        return False

    async def _claim(self, conv: ConversationRuntime) -> list[ResumableCall]:
        claimed = []
        for call in await self.store.resumable(conv.id):
            if self.manager.get(call.call_id) is not None:
                continue  # live here
            if self.peers is not None and await self.peers.alive(call.worker):
                continue  # live on another worker
            if await self.store.claim(call.call_id, call.worker):
                claimed.append(call)
        return claimed

    async def _deliver_when_shown(
        self, conv: ConversationRuntime, cmd: ElicitResponseCommand, timeout: float = 10.0
    ) -> None:
        """Deliver an answer for a call being resumed by replay once its question shows again.

        Only a call in ``conv.resuming`` is waited for, and only until its replay shows the
        question or ends: the socket that sent the answer handles nothing else meanwhile.
        """
        shown = conv.resuming.get(cmd.call_id)
        if shown is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(shown.wait(), timeout)
        pending = conv.pending.get(cmd.call_id)
        if pending is not None and pending.waiter is not None:
            await self.elicit_response(conv.id, cmd)
            return
        raise CommandRefused("NOT_WAITING", "This question is not waiting for an answer.")

    async def _phase(self, conv: ConversationRuntime, phase: Phase) -> None:
        conv.phase = phase
        await self.store.save_phase(conv.id, phase)
        await self.sink(conv.id, self.state(conv.id))

    async def _unmatched_response(
        self, conv: ConversationRuntime, cmd: ElicitResponseCommand
    ) -> None:
        if cmd.call_id in conv.resuming:
            await self._deliver_when_shown(conv, cmd)  # being replayed: its form comes back
            return
        if self.manager.get(cmd.call_id) is not None and cmd.call_id in conv.calls:
            # Live here with no question open (answered, the tool works on): nothing to wait for.
            raise CommandRefused("NOT_WAITING", "This question is not waiting for an answer.")
        if cmd.call_id not in dangling_calls(await self.store.messages(conv.id)):
            raise CommandRefused("NOT_FOUND", f"No tool call {cmd.call_id!r} in this conversation.")
        owner = next(
            (c.worker for c in await self.store.resumable(conv.id) if c.call_id == cmd.call_id), ""
        )
        if owner and self.peers is not None and await self.peers.route(owner, conv.id, cmd):
            logger.info("answer for %s handed to worker %s", cmd.call_id, owner)
            return  # the worker holding the session took the answer; its events reach us
        logger.info("answer for %s: worker %r did not take it; resuming here", cmd.call_id, owner)
        # Its journal survived: resume, then answer. recover() may resume other calls of the
        # conversation and not this one (claimed elsewhere, or no journal): then do not wait.
        if await self.recover(conv.id) and cmd.call_id in conv.resuming:
            await self._deliver_when_shown(conv, cmd)
            return
        if conv.running:
            raise CommandRefused("BUSY", "Please wait for the current reply.")
        self._start(conv, lost=[cmd])

    async def _turn(
        self,
        conv: ConversationRuntime,
        lost: list[ElicitResponseCommand],
        text: str | None,
        resume: Sequence[ResumableCall] = (),
    ) -> None:
        try:
            if resume:  # finish the suspended calls first: their results belong before anything
                await self._phase(conv, "executing_tools")
                await self._append_results(
                    conv,
                    [c.call_id for c in resume],
                    await asyncio.gather(
                        *(self.runner.resume(conv, c) for c in resume), return_exceptions=True
                    ),
                )
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
                await self._append_results(conv, [c.id for c in reply.tool_calls], outcomes)
        except Exception:  # a bug in a turn must not take the conversation down
            logger.exception("turn of conversation %s failed", conv.id)
            failed = ErrorEvent(code="INTERNAL_ERROR", message="The reply failed; please retry.")
            with contextlib.suppress(Exception):  # the sink itself may be what failed
                await self.sink(conv.id, failed)
        finally:
            conv.turn = None
            for call in resume:  # if the turn failed before replaying them, stop waiting
                conv.resumed(call.call_id)
        with contextlib.suppress(Exception):
            await self._phase(conv, "done")
        if conv.turn is None and not conv.pending and not conv.approvals:  # nothing to remember
            self._conversations.pop(conv.id, None)

    async def _append_results(
        self,
        conv: ConversationRuntime,
        call_ids: Sequence[str],
        outcomes: Sequence[str | BaseException],
    ) -> None:
        for call_id, outcome in zip(call_ids, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                logger.error("tool call %s failed", call_id, exc_info=outcome)
                outcome = f"Error: The tool call failed inside the server: {outcome!r}"
            await self.store.append(
                conv.id,
                uuid.uuid4().hex,
                {"role": "tool", "tool_call_id": call_id, "content": outcome},
            )

    async def _recover_lost(self, conv: ConversationRuntime, sessions: dict[str, str]) -> None:
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
        self, conv: ConversationRuntime, messages: list[dict[str, Any]]
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
        reply.tool_calls = [_own_id(call) for call in reply.tool_calls]
        await self.store.append(conv.id, message_id, reply.to_message())
        if reply.text:
            await self.sink(conv.id, AssistantMessage(message_id=message_id, content=reply.text))
        return reply

    async def execute_tool_call(self, conversation_id: str, call: ToolCallRequest) -> str:
        """Run one tool call to its end; return the tool message for the model."""
        return await self.runner.run(self._conversation(conversation_id), call)
