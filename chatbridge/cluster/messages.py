"""The messages workers exchange through the channel layer: a closed union of requests and
one of replies, each parsed once where it arrives (``parse_request``, ``parse_reply``)."""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from chatbridge.author.exceptions import RefusalCode
from chatbridge.calls.commitment import AbortDecision
from chatbridge.engine.protocol import Command, ElicitResponseCommand

__all__ = [
    "Aborted",
    "AbortCall",
    "Answered",
    "ChatEventCopy",
    "CommandDone",
    "Delivered",
    "Held",
    "Hidden",
    "ListSessions",
    "PageAnswer",
    "Ping",
    "Pong",
    "RelayRequest",
    "RoundDone",
    "RoundRequest",
    "RoutedAnswer",
    "RoutedCommand",
    "Sessions",
    "Show",
    "Showing",
    "ShownAck",
    "TaskDone",
    "TaskError",
    "TaskRequest",
    "WorkerReply",
    "WorkerRequest",
    "parse_reply",
    "parse_request",
]

logger = logging.getLogger("chatbridge.workers")


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True)


class _Request(_Message):
    reply_to: str = ""  # the sender's channel, set as it is sent; empty when no reply is wanted


# -- requests: what a worker asks of the one holding a call, or of all ---------------------


class AbortCall(_Request):
    """An operator's abort, to whichever worker holds the call."""

    type: Literal["workers.abort"] = "workers.abort"
    session_id: str
    reason: str
    by: str = ""


class PageAnswer(_Request):
    """A URL question's answer reported by its page, to the worker holding the call."""

    type: Literal["workers.page_answer"] = "workers.page_answer"
    call_id: str
    elicit_id: str
    result: dict[str, Any]


class Ping(_Request):
    """Are you there?"""

    type: Literal["workers.ping"] = "workers.ping"


class RoutedAnswer(_Request):
    """A user's answer for a call held by the receiving worker."""

    type: Literal["workers.answer"] = "workers.answer"
    conversation_id: str
    command: ElicitResponseCommand


class Show(_Request):
    """Publish the conversation's state and open forms again."""

    type: Literal["workers.show"] = "workers.show"
    conversation_id: str


class RoutedCommand(_Request):
    """A user's abort, approve, deny or stop for a conversation's call held there."""

    type: Literal["workers.command"] = "workers.command"
    conversation_id: str
    command: Command


class TaskRequest(_Request):
    """An MCP task request (get, update, cancel) for a task held there."""

    type: Literal["workers.task"] = "workers.task"
    op: str
    task_id: str
    responses: dict[str, Any] = Field(default_factory=dict)
    origin: str = ""


class RoundRequest(_Request):
    """A 2026-07-28 retry of a call held there (``chatbridge.mcp.round_routing.Routed``)."""

    type: Literal["workers.round"] = "workers.round"
    retry: dict[str, Any]


class ListSessions(_Request):
    """What is live on you right now?"""

    type: Literal["workers.list"] = "workers.list"


class ChatEventCopy(_Request):
    """An event of a conversation the receiving worker shows (``chatbridge.cluster.broadcast``)."""

    type: Literal["workers.chat_event"] = "workers.chat_event"
    conversation_id: str
    event: dict[str, Any]


class Showing(_Request):
    """``worker`` shows these conversations: send their events to ``channel``. ``everything``:
    it shows no other (forget any other it said); ``ask_back``: tell it what you show."""

    type: Literal["workers.showing"] = "workers.showing"
    worker: str
    channel: str
    conversations: list[str]
    everything: bool = False
    ask_back: bool = False
    ack: str = ""  # when set: answer ``ShownAck`` with it, to ``channel``, once taken in


class ShownAck(_Request):
    """``worker`` took in the ``Showing`` whose ``ack`` was ``token``."""

    type: Literal["workers.shown_ack"] = "workers.shown_ack"
    worker: str
    token: str


class Hidden(_Request):
    """``worker`` no longer shows the conversation."""

    type: Literal["workers.hidden"] = "workers.hidden"
    worker: str
    conversation_id: str


class RelayRequest(_Request):
    """An HTTP request for a legacy MCP session held there (``chatbridge.mcp.session_relay``):
    its caller identified, its body read (within the SDK's cap) by the worker that received
    it. What the holder answers streams back to ``link`` on ``reply_to``, the sender's relay
    inbox (``chatbridge.mcp.relay_wire.Inbox``)."""

    type: Literal["workers.relay"] = "workers.relay"
    link: str = ""  # set as it is sent, with ``reply_to``
    origin: str  # the worker that received it
    session_id: str
    method: str
    path: str
    query_string: str = ""
    headers: list[tuple[str, str]]  # latin-1, as received
    body: bytes = b""
    client: tuple[str, int] | None = None
    scheme: str = "http"
    http_version: str = "1.1"
    caller: dict[str, Any]  # ``chatbridge.mcp.callers.Caller``'s fields


WorkerRequest: TypeAlias = Annotated[
    AbortCall
    | PageAnswer
    | Ping
    | RoutedAnswer
    | Show
    | RoutedCommand
    | TaskRequest
    | RoundRequest
    | ListSessions
    | ChatEventCopy
    | Showing
    | ShownAck
    | Hidden
    | RelayRequest,
    Field(discriminator="type"),
]


# -- replies, to the sender's channel ------------------------------------------------------


class _Reply(_Message):
    worker: str  # who replied


class Held(_Reply):
    """The call to abort is held here; what the abort decided follows."""

    type: Literal["workers.held"] = "workers.held"


class Aborted(_Reply):
    """What an abort decided ("pending" when the holder has not said yet)."""

    type: Literal["workers.aborted"] = "workers.aborted"
    decision: AbortDecision | Literal["pending"]
    said: str | None = None  # for a call that has committed: what the operator is told


class Received(_Reply):
    """A routed request reached the worker it was sent to, which serves it now; its outcome
    follows (the sender sends it again only while it hears nothing: a lost message)."""

    type: Literal["workers.received"] = "workers.received"


class Delivered(_Reply):
    type: Literal["workers.delivered"] = "workers.delivered"


class Pong(_Reply):
    type: Literal["workers.pong"] = "workers.pong"


class Answered(_Reply):
    type: Literal["workers.answered"] = "workers.answered"


class CommandDone(_Reply):
    """A routed command's outcome: done, or refused with a code."""

    type: Literal["workers.done"] = "workers.done"
    ok: bool
    code: RefusalCode | None = None
    message: str = ""


class TaskError(_Message):
    code: int
    message: str


class TaskDone(_Reply):
    """A routed task request's outcome: the task as tasks/get shows it, or the MCP error."""

    type: Literal["workers.task_done"] = "workers.task_done"
    task: dict[str, Any] | None = None
    error: TaskError | None = None


class RoundDone(_Reply):
    """A routed retry's outcome: ``{"result" | "input_required": ...}`` or ``{"error": ...}``
    (``chatbridge.mcp.round_routing.served``)."""

    type: Literal["workers.round_done"] = "workers.round_done"
    reply: dict[str, Any]


class Sessions(_Reply):
    """The live sessions of the replying worker."""

    type: Literal["workers.sessions"] = "workers.sessions"
    sessions: list[dict[str, Any]]


WorkerReply: TypeAlias = Annotated[
    Held
    | Aborted
    | Received
    | Delivered
    | Pong
    | Answered
    | CommandDone
    | TaskDone
    | RoundDone
    | Sessions,
    Field(discriminator="type"),
]

_REQUESTS: TypeAdapter[WorkerRequest] = TypeAdapter(WorkerRequest)
_REPLIES: TypeAdapter[WorkerReply] = TypeAdapter(WorkerReply)


def parse_request(raw: Any) -> WorkerRequest | None:
    """``raw`` as received, as a request; None (logged) for a message that is not one."""
    try:
        return _REQUESTS.validate_python(raw)
    except ValidationError as exc:
        logger.error("malformed worker message %r dropped: %s", _type(raw), exc)
        return None


def parse_reply(raw: Any) -> WorkerReply | None:
    """``raw`` as received, as a reply; None (logged) for a message that is not one."""
    try:
        return _REPLIES.validate_python(raw)
    except ValidationError as exc:
        logger.error("malformed worker reply %r dropped: %s", _type(raw), exc)
        return None


def _type(raw: Any) -> Any:
    return raw.get("type") if isinstance(raw, dict) else type(raw).__name__
