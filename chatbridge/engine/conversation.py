"""What the engine keeps per conversation (its live state and open questions), and the
contracts around it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from chatbridge.author.exceptions import CommandRefused
from chatbridge.author.plugins import FormPost
from chatbridge.author.storable import scrubbed
from chatbridge.calls.sessions import PluginSession
from chatbridge.engine.protocol import (
    Abort,
    Approve,
    ChatEvent,
    Deny,
    ElicitForm,
    ElicitResponseCommand,
    Phase,
    Stop,
)

__all__ = [
    "LOST_SESSION_MESSAGE",
    "CommandRefused",
    "LiveConversation",
    "ConversationStore",
    "EventSink",
    "LocalLeases",
    "OnRecord",
    "Peers",
    "PendingApproval",
    "PendingElicit",
    "ResumableCall",
    "TurnLeases",
    "VisitorLimits",
    "as_llm_message",
    "read_back",
    "title_of",
    "counted",
    "dangling_calls",
    "too_many_running",
]

LOST_SESSION_MESSAGE = "Error: Plugin session was lost. Please retry the operation."
TITLE_LENGTH = 60  # characters of a conversation's first message that name it


def title_of(text: str) -> str:
    """The title a conversation takes from its first message: its words, up to 60 characters
    (and an ellipsis when cut)."""
    words = " ".join(text.split())
    return words[:TITLE_LENGTH] + ("…" if len(words) > TITLE_LENGTH else "")


EventSink = Callable[[str, ChatEvent], Awaitable[None]]


class ConversationStore(Protocol):
    """Where a conversation's messages (OpenAI format) and phase are kept."""

    async def messages(self, conversation_id: str) -> list[dict[str, Any]]: ...

    async def append(
        self, conversation_id: str, message_id: str, message: dict[str, Any], *, wait: bool = True
    ) -> None:
        """Put ``message`` on record, after every message appended before it. With ``wait``
        False the store may write it later, but before anything it writes or reads after it
        (the next waited append, ``messages``, the turn's release): a turn hands over its
        replies this way, and the write that must wait carries them in its commit."""
        ...

    async def fork(
        self, conversation_id: str, message_id: str, *, edit: bool
    ) -> tuple[list[str], list[str]]:
        """Abandon the messages from ``message_id`` on (kept, never read by the model): a
        user's message edited, or (not ``edit``) the last reply regenerated. The ids of the
        abandoned messages and of their tool calls; ``CommandRefused`` says why it cannot."""

    async def save_phase(self, conversation_id: str, phase: Phase) -> None: ...

    async def resumable(self, conversation_id: str) -> list[ResumableCall]:
        """Tool calls of the conversation recorded as live, with their durable journals."""
        ...

    async def claim(self, call_id: str, worker: str) -> bool:
        """Take a call over from ``worker`` (compare-and-set): True for exactly one claimer."""
        ...


class TurnLeases(Protocol):
    """Who runs a conversation's turn, across every worker: a lease with an expiry, taken by
    compare-and-set and renewed while the turn runs (DESIGN §9)."""

    async def take_turn(self, conversation_id: str, replacing: str = "") -> bool:
        """Take the lease if it is free, expired, ours, or held by ``replacing`` (a worker
        known to be dead); True for exactly one taker."""
        ...

    async def renew_turn(self, conversation_id: str) -> bool:
        """Push the expiry on; False if the lease is no longer ours."""
        ...

    async def release_turn(self, conversation_id: str) -> bool:
        """Give the lease up (only if it is ours); the turn is over (its phase ``done``).
        Whether messages may be waiting in the conversation's queue (False only when the
        leases know that none are)."""
        ...

    async def turn_holder(self, conversation_id: str) -> str:
        """The worker holding an unexpired lease, or ``""``."""
        ...


def counted(count: int, word: str) -> str:
    """``1 chat``, ``3 chats``: a count in words people read."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def too_many_running(limit: int) -> CommandRefused:
    """The refusal of a new message while the visitor's other chats are busy up to the cap."""
    return CommandRefused(
        "TOO_MANY_RUNNING",
        f"You have {counted(limit, 'chat')} busy with a reply or a question waiting for your "
        "answer, the most you may have at once. Answer or stop one of them first, then send "
        "this again.",
    )


class VisitorLimits(Protocol):
    """Caps per visitor (the browser session or user owning conversations) and per client
    address on what holds memory: the turns running in their chats, across every worker."""

    async def take_new_turn(
        self, conversation_id: str, replacing: str = "", *, address: str = ""
    ) -> bool:
        """``TurnLeases.take_turn`` for a turn a new message starts (sent from ``address``, ""
        when not known); a ``TOO_MANY_RUNNING`` refusal when the visitor's other chats, or the
        address's, already run that many turns. Turns that resume calls or start queued
        messages are not capped: they are the way out."""
        ...


class LocalLeases:
    """``TurnLeases`` for a single process: the hub's own bookkeeping already excludes a
    second turn, so every lease is granted."""

    async def take_turn(self, conversation_id: str, replacing: str = "") -> bool:
        return True

    async def renew_turn(self, conversation_id: str) -> bool:
        return True

    async def release_turn(self, conversation_id: str) -> bool:
        return True  # the queue is not the leases' to know

    async def turn_holder(self, conversation_id: str) -> str:
        return ""


class Peers(Protocol):
    """Other worker processes (scale-out): are they alive, and hand them commands."""

    async def alive(self, worker: str) -> bool:
        """Is ``worker`` (never this process) alive, by its heartbeat?"""
        ...

    async def route(
        self, worker: str, conversation_id: str, command: ElicitResponseCommand
    ) -> dict[str, Any] | None:
        """Hand an answer to ``worker``; its acknowledgement, or None if unreachable."""
        ...

    async def show(self, worker: str, conversation_id: str) -> None:
        """Ask ``worker`` to send the conversation's state and open forms again (best effort)."""
        ...

    async def forward(
        self, worker: str, conversation_id: str, command: Abort | Approve | Deny | Stop
    ) -> dict[str, Any] | None:
        """Carry out a command on ``worker``: ``{"ok": True}``, ``{"ok": False, "code": ...,
        "message": ...}``, or None if it cannot be reached (or is this process)."""
        ...


@dataclass(frozen=True)
class OnRecord:
    """What a socket opening on a conversation read of it in one visit to the record: whether
    any of its calls is suspended (maybe by a process that is gone), the worker whose turn
    lease on it is live ("" for none), and whether messages wait in its queue. Recovery asks
    again only for what this says is there."""

    calls_open: bool
    turn_holder: str
    queued: bool


@dataclass(frozen=True)
class ResumableCall:
    """A suspended tool call that can be resumed by replaying its journal."""

    call_id: str
    tool_name: str
    arguments: dict[str, Any]
    journal: list[dict[str, Any]]
    worker: str
    abort_requested: tuple[str, str | None] | None = None  # asked to stop after committing
    meta: dict[str, str] = field(default_factory=dict)  # what the call was started with


@dataclass
class PendingElicit:
    """A question of a call open in this conversation, whatever kind of tool asked it (seed
    002): the session that owns it and the post its form waits for. What was asked, the form
    last shown and the refused answers are the session's; nothing here copies them."""

    session: PluginSession
    elicit_id: str
    _waiter: asyncio.Future[FormPost] | None = field(default=None, repr=False)
    # Set while the form waits for a post: an answer arriving while the form is being drawn
    # (a call resumed by replay, a form drawn again after a refused answer) waits for it.
    _ready: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def waiter(self) -> asyncio.Future[FormPost] | None:
        return self._waiter

    @waiter.setter
    def waiter(self, waiter: asyncio.Future[FormPost] | None) -> None:
        self._waiter = waiter
        if waiter is not None and not waiter.done():
            self._ready.set()
        else:
            self._ready.clear()

    async def wait_shown(self, timeout: float) -> bool:
        """Wait until the form waits for a post; False if the question closed first (answered,
        expired, aborted) or ``timeout`` passed."""
        if self._ready.is_set():
            return True
        shown = asyncio.ensure_future(self._ready.wait())
        closed = asyncio.ensure_future(self.session.question_closed(self.elicit_id))
        try:
            await asyncio.wait({shown, closed}, timeout=timeout, return_when="FIRST_COMPLETED")
        finally:
            shown.cancel()
            closed.cancel()
        return self._ready.is_set()

    @property
    def call_id(self) -> str:
        return self.session.call_id

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def form(self) -> ElicitForm | None:
        """The form last shown for this question (the question keeps it while it is open)."""
        question = self.session.question
        if question is None or question.id != self.elicit_id:
            return None
        return question.shown if isinstance(question.shown, ElicitForm) else None

    def deliver(self, post: FormPost) -> bool:
        """Hand a post to the waiting form; False if nothing is waiting."""
        if self._waiter is None or self._waiter.done():
            return False
        self._waiter.set_result(post)
        self._ready.clear()
        return True


@dataclass
class LiveConversation:
    """One conversation's live state in this process."""

    id: str
    phase: Phase = "idle"
    turn: asyncio.Task[None] | None = None
    pending: dict[str, PendingElicit] = field(default_factory=dict)  # call id → open question
    approvals: dict[str, PendingApproval] = field(default_factory=dict)  # call id → approval
    calls: set[str] = field(default_factory=set)  # tool calls this process ran
    # Calls being resumed by replay whose question is not shown again yet: an answer for one
    # of them may wait for its form (the event is set once it shows, or the replay ends).
    resuming: dict[str, asyncio.Event] = field(default_factory=dict)
    # Set while a turn is being started (lease, claims): an answer arriving meanwhile waits
    # for it instead of being refused, since the turn may be the one resuming its call.
    starting: asyncio.Event | None = None
    # Commands working with this state across awaits (``ChatHub._held``): kept until they end.
    holders: int = 0

    def resumed(self, call_id: str) -> None:
        """The call's replay showed its question, or ended: answers need not wait for it."""
        shown = self.resuming.pop(call_id, None)
        if shown is not None:
            shown.set()

    def waiting_phase(self) -> Phase:
        if self.pending:
            return "plugin_awaiting_elicit"
        return "awaiting_approval" if self.approvals else "executing_tools"

    @property
    def running(self) -> bool:
        return self.turn is not None and not self.turn.done()

    @property
    def busy(self) -> bool:
        """A turn runs here or is being started: no other may start."""
        return self.running or self.starting is not None


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


def as_llm_message(role: str, content: str, tool_calls: Any, tool_call_id: str) -> dict[str, Any]:
    """A stored message as the model reads it (what ``ConversationStore.messages`` gives)."""
    message: dict[str, Any] = {"role": role, "content": content or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if tool_call_id:
        message["tool_call_id"] = tool_call_id
    if role != "assistant" and message["content"] is None:
        message["content"] = ""
    return message


def read_back(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as appended to a store, as the store gives it back to the model (which
    stores text with NUL characters replaced, ``chatbridge.author.storable``)."""
    message = scrubbed(message)
    return as_llm_message(
        str(message.get("role") or ""),
        str(message.get("content") or ""),
        message.get("tool_calls"),
        str(message.get("tool_call_id") or ""),
    )
