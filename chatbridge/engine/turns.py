"""One turn of a conversation (DESIGN §3): the phases from the user's message through the
model's replies and their tool calls to ``done``, under the conversation's lease.

``ChatHub`` starts turns and owns the conversations; ``Turns`` runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from chatbridge.author.exceptions import ClaimLost
from chatbridge.author.language import gettext as _
from chatbridge.calls.outcome import Failed
from chatbridge.engine.completion import Completion, ToolCallRequest, stream_completion
from chatbridge.engine.conversation import (
    LOST_SESSION_MESSAGE,
    CommandRefused,
    ConversationStore,
    EventSink,
    LiveConversation,
    ResumableCall,
    TurnLeases,
    counted,
    dangling_calls,
    read_back,
    title_of,
)
from chatbridge.engine.protocol import (
    AssistantDelta,
    AssistantMessage,
    ElicitResponseCommand,
    ErrorEvent,
    Phase,
    SessionError,
    UserMessage,
)
from chatbridge.engine.tool_message import ToolReply, failed_reply

if TYPE_CHECKING:
    from chatbridge.author.plugins import PluginRegistry
    from chatbridge.calls.manager import SessionManager
    from chatbridge.engine.tool_calls import ToolCallRunner

SetPhase = Callable[[LiveConversation, Phase], Awaitable[None]]

__all__ = [
    "LEASE_RENEW_SECONDS",
    "LocalQueue",
    "MessageQueue",
    "QueuedMessage",
    "Turns",
    "queue_full",
]

logger = logging.getLogger("chatbridge.engine")

# A call left without its result by a lost session: the model is told to retry it.
LOST_SESSION = ToolReply(
    LOST_SESSION_MESSAGE, Failed(error_type="", message="The tool session was lost.")
)

LEASE_RENEW_SECONDS = 5.0  # the lease lasts longer (see the store): a few renewals may fail


def _own_id(call: ToolCallRequest) -> ToolCallRequest:
    """The call with an id of our own. A call id is a session id across every worker and the
    database, and providers may omit ids, reuse them or number them per reply."""
    return ToolCallRequest(f"call_{uuid.uuid4().hex[:24]}", call.name, call.arguments)


@dataclass(frozen=True)
class QueuedMessage:
    """A user's message waiting for the running turn to end; it starts the next one."""

    id: str  # the message id it will have in the conversation
    text: str
    client_id: str | None = None
    address: str = ""  # the sender's client address, for the cap per address ("": unknown)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "client_id": self.client_id}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueuedMessage:
        return cls(str(data["id"]), str(data["text"]), data.get("client_id") or None)


def queue_full(limit: int, *, visitor: bool = False) -> CommandRefused:
    """The refusal of a message past the queue's cap: in this chat, or in all of a visitor's.
    The composer keeps the text (as with every refusal)."""
    if visitor:
        text = (
            f"You have {counted(limit, 'message')} waiting in your chats, the most we keep for "
            "you. Wait for the current replies to end, then send this again."
        )
    else:
        waiting = "is" if limit == 1 else "are"
        text = (
            f"{counted(limit, 'message')} {waiting} already waiting in this chat, the most it "
            "keeps. Wait for the current reply to end, then send this again."
        )
    return CommandRefused("QUEUE_FULL", text)


class MessageQueue(Protocol):
    """Where queued messages wait, in order, per conversation (durable in the Django store,
    so they survive a restart)."""

    async def queued(self, conversation_id: str) -> list[QueuedMessage]: ...

    async def enqueue(self, conversation_id: str, message: QueuedMessage) -> None:
        """Keep the message last in line; ``queue_full``'s refusal past a cap."""
        ...

    async def dequeue(self, conversation_id: str, message_id: str) -> None:
        """Remove the message (it is in the conversation now); nothing if it is not queued."""
        ...


@dataclass
class LocalQueue:
    """``MessageQueue`` in memory (a hub without a durable store), ``per_conversation``
    messages at most in each conversation (None: no cap)."""

    messages: dict[str, list[QueuedMessage]] = field(default_factory=dict)
    per_conversation: int | None = 20

    async def queued(self, conversation_id: str) -> list[QueuedMessage]:
        return list(self.messages.get(conversation_id, ()))

    async def enqueue(self, conversation_id: str, message: QueuedMessage) -> None:
        waiting = self.messages.setdefault(conversation_id, [])
        if self.per_conversation is not None and len(waiting) >= self.per_conversation:
            raise queue_full(self.per_conversation)
        waiting.append(message)

    async def dequeue(self, conversation_id: str, message_id: str) -> None:
        kept = [m for m in self.messages.get(conversation_id, ()) if m.id != message_id]
        if kept:
            self.messages[conversation_id] = kept
        else:
            self.messages.pop(conversation_id, None)


class Turns:
    """Runs the turns of a hub's conversations."""

    def __init__(
        self,
        *,
        store: ConversationStore,
        leases: TurnLeases,
        queue: MessageQueue,
        manager: SessionManager,
        registry: PluginRegistry,
        runner: ToolCallRunner,
        sink: EventSink,
        set_phase: SetPhase,
        model: str,
        max_iterations: int,
        next_queued: Callable[[LiveConversation], Awaitable[bool]],
        forget: Callable[[LiveConversation], None],
    ) -> None:
        """What a turn needs and nothing more: the conversation store, its turn lease and
        queue, the live sessions and plugins, the tool-call runner, where events go and how
        the phase changes, the model, and the hub's two steps after a turn (start the queued
        message, forget an idle conversation)."""
        self.store, self.leases, self.queue = store, leases, queue
        self.manager, self.registry, self.runner = manager, registry, runner
        self.sink, self.set_phase, self.model = sink, set_phase, model
        self.max_iterations = max_iterations
        self.next_queued, self.forget = next_queued, forget
        # Conversation id → set to stop the reply being streamed there (the ``stop`` command).
        self.stops: dict[str, asyncio.Event] = {}

    def stop(self, conversation_id: str) -> bool:
        """Stop the reply streaming in the conversation; False if none is."""
        stop = self.stops.get(conversation_id)
        if stop is None:
            return False
        stop.set()
        return True

    async def run(
        self,
        conv: LiveConversation,
        lost: list[ElicitResponseCommand],
        text: str | None,
        resume: Sequence[ResumableCall] = (),
        *,
        client_id: str | None = None,
        queued: QueuedMessage | None = None,
    ) -> None:
        """A turn. ``text``: the user's message, if one started it (``client_id``: the
        sender's id for it); ``queued``: the queued message that started it."""
        renewer = asyncio.create_task(self._keep_lease(conv), name=f"chatbridge-lease:{conv.id}")
        try:
            if resume:  # finish the suspended calls first: their results belong before anything
                await self.set_phase(conv, "executing_tools")
                await self._append_results(
                    conv,
                    [c.call_id for c in resume],
                    await asyncio.gather(
                        *(self.runner.resume(conv, c) for c in resume), return_exceptions=True
                    ),
                )
            message_id = queued.id if queued else uuid.uuid4().hex
            if text is not None:
                user = {"role": "user", "content": text}
                await self.store.append(conv.id, message_id, user, wait=False)
                if queued is not None:  # in the conversation now (kept until then)
                    await self.queue.dequeue(conv.id, queued.id)
            # Read once (with the user's message): this turn holds the conversation, so what
            # it appends from here on is all that changes, and it keeps ``history`` with it.
            # Appended without waiting, the user's message is on record with the turn's next
            # write that waits (its call's question, its release), or on its own within the
            # writer's linger (0.1 s).
            history = await self.store.messages(conv.id)
            if text is not None:
                await self.sink(
                    conv.id,
                    UserMessage(
                        message_id=message_id,
                        content=text,
                        client_id=queued.client_id if queued else client_id,
                        title=title_of(text) if len(history) == 1 else None,
                    ),
                )
            await self.set_phase(conv, "process_plugin_abort")
            await self.set_phase(conv, "process_plugin_responses")
            await self._recover_lost(conv, {c.call_id: c.session_id for c in lost}, history)
            for _iteration in range(self.max_iterations):
                await self.set_phase(conv, "start_iteration")
                await self.set_phase(conv, "streaming")
                reply = await self._stream_reply(conv, history)
                if reply is None or not reply.tool_calls:
                    break
                await self.set_phase(conv, "executing_tools")
                # All calls of a reply run at once: their questions and approvals show together.
                outcomes = await asyncio.gather(
                    *(self.runner.run(conv, call) for call in reply.tool_calls),
                    return_exceptions=True,
                )
                await self._append_results(
                    conv, [c.id for c in reply.tool_calls], outcomes, history
                )
        except ClaimLost as lost:  # another worker holds a call of this turn: it goes on there
            logger.info("turn of conversation %s stopped here: %s", conv.id, lost)
        except Exception:  # a bug in a turn must not take the conversation down
            logger.exception("turn of conversation %s failed", conv.id)
            failed = ErrorEvent(code="INTERNAL_ERROR", message="The reply failed; please retry.")
            with contextlib.suppress(Exception):  # the sink itself may be what failed
                await self.sink(conv.id, failed)
        finally:
            renewer.cancel()
            # Released while this turn still counts as running here: a message arriving now
            # sees BUSY rather than taking a lease that this release would then clear. The
            # release carries the turn's last messages (appended without waiting) to the record.
            waiting = True
            try:
                waiting = await self.leases.release_turn(conv.id)
            except Exception:  # it expires on its own
                logger.exception("releasing the turn of conversation %s failed", conv.id)
            conv.turn = None
            for call in resume:  # if the turn failed before replaying them, stop waiting
                conv.resumed(call.call_id)
        with contextlib.suppress(Exception):
            await self.set_phase(conv, "done")
        try:  # a message queued during this turn starts the next one
            if waiting:
                await self.next_queued(conv)
        except Exception:
            logger.exception("starting the queued message of conversation %s failed", conv.id)
        self.forget(conv)  # nothing runs or waits: nothing to remember

    async def _keep_lease(self, conv: LiveConversation) -> None:
        """Renew the conversation's lease while its turn runs."""
        while True:
            await asyncio.sleep(LEASE_RENEW_SECONDS)
            try:
                if not await self.leases.renew_turn(conv.id):
                    logger.error("conversation %s: another worker took this turn's lease", conv.id)
            except Exception:  # the database may be back before the lease expires
                logger.exception("renewing the turn of conversation %s failed", conv.id)

    async def _append(
        self,
        conv: LiveConversation,
        message_id: str,
        message: dict[str, Any],
        history: list[dict[str, Any]] | None,
    ) -> None:
        """Append ``message`` to the conversation, and to the turn's ``history`` once read.
        Not waited for: the next write that waits (a call's row and question, the turn's
        release) carries it to the record, in order."""
        await self.store.append(conv.id, message_id, message, wait=False)
        if history is not None:
            history.append(read_back(message))

    async def _append_results(
        self,
        conv: LiveConversation,
        call_ids: Sequence[str],
        replies: Sequence[ToolReply | BaseException],
        history: list[dict[str, Any]] | None = None,
    ) -> None:
        for reply in replies:
            if isinstance(reply, ClaimLost):  # a stale copy: record nothing, stop the turn
                raise reply
        for call_id, reply in zip(call_ids, replies, strict=True):
            if isinstance(reply, BaseException):
                logger.error("tool call %s failed", call_id, exc_info=reply)
                reply = failed_reply(
                    f"The tool call failed inside the server: {reply!r}", type(reply).__name__
                )
            await self._append(conv, uuid.uuid4().hex, reply.message(call_id), history)

    async def _recover_lost(
        self, conv: LiveConversation, sessions: dict[str, str], history: list[dict[str, Any]]
    ) -> None:
        """Answer every tool call left without a result by a lost session (DESIGN §2)."""
        for call_id in dangling_calls(history):
            if self.manager.get(call_id) is not None:
                continue
            await self.sink(
                conv.id,
                SessionError(
                    session_id=sessions.get(call_id, call_id),
                    call_id=call_id,
                    error="SESSION_NOT_FOUND",
                    message=_("The tool session was lost (for example in a restart)."),
                ),
            )
            await self._append(conv, uuid.uuid4().hex, LOST_SESSION.message(call_id), history)

    async def _stream_reply(
        self, conv: LiveConversation, history: list[dict[str, Any]]
    ) -> Completion | None:
        """The model's reply to ``history``, streamed to the sockets (and appended to it). A
        ``stop`` ends it where it is: the text shown so far is the reply (on record, so the
        model later sees what the user saw), and tool calls it was making are dropped."""
        messages = list(history)
        message_id = uuid.uuid4().hex
        reply = Completion()
        tools = [p.tool.function_spec() for p in self.registry]
        shown: list[str] = []

        async def stream() -> None:
            async for delta in stream_completion(self.model, messages, tools, reply):
                shown.append(delta)
                await self.sink(conv.id, AssistantDelta(message_id=message_id, delta=delta))

        stop = self.stops[conv.id] = asyncio.Event()
        streaming = asyncio.create_task(stream(), name=f"chatbridge-stream:{conv.id}")
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({streaming, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if self.stops.get(conv.id) is stop:
                del self.stops[conv.id]
            if not streaming.done():  # stopped (or this turn is being cancelled)
                streaming.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await streaming
        stopped = streaming.cancelled()
        if stopped:
            reply = Completion(text="".join(shown))
            logger.info("conversation %s: the user stopped the reply", conv.id)
        elif (exc := streaming.exception()) is not None:  # provider errors come in many types
            logger.warning("model %s failed: %s", self.model, exc)
            await self.sink(
                conv.id, ErrorEvent(code="LLM_ERROR", message=f"The model failed: {exc}")
            )
            return None
        reply.tool_calls = [_own_id(call) for call in reply.tool_calls]
        if reply.text or reply.tool_calls:  # a reply stopped before any text is no message
            message = reply.to_message()
            if stopped:  # for the page; a store gives the model only role and content
                message["stopped"] = True
            await self._append(conv, message_id, message, history)
        if reply.text or stopped:
            await self.sink(
                conv.id,
                AssistantMessage(message_id=message_id, content=reply.text, stopped=stopped),
            )
        return reply
