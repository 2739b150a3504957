"""The chat protocol: events (server → client) and commands (client → server), DESIGN §3;
the phases a conversation moves through are ``chatbridge.engine.phases``'s (named here too).

Both are pydantic models with a ``type`` discriminator; their JSON is the WebSocket protocol of
API clients and the input of the HTML fragments browsers receive.

A frame is JSON as the protocol accepts it (``decode_frame``): finite numbers and text that is
valid Unicode. Python's ``json`` reads ``NaN``, ``Infinity`` and ``1e999`` (as ``inf``), and
reads an unpaired surrogate escape (``"\\ud800"``) into a ``str`` that cannot be encoded as
UTF-8. Both pass validation and fail much later, wherever the value is written out (the
database, a socket, a rendered form); ``decode_frame`` refuses them at the door, with a message
that says what to fix.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from chatbridge.author.exceptions import ChatBridgeError, RefusalCode
from chatbridge.calls.outcome import Outcome
from chatbridge.engine.phases import TRANSITIONS, Phase, PhaseError

__all__ = [
    "COMMANDS",
    "TRANSITIONS",
    "PhaseError",
    "check_move",
    "Abort",
    "Approve",
    "ApprovalRequest",
    "AssistantDelta",
    "AssistantMessage",
    "ChatEvent",
    "Command",
    "ConversationForked",
    "ConversationState",
    "Deny",
    "ElicitComplete",
    "ElicitForm",
    "ElicitResponseAck",
    "EditMessage",
    "ElicitResponseCommand",
    "ElicitStart",
    "ErrorEvent",
    "NotStrictJson",
    "LogLine",
    "MessageQueued",
    "Phase",
    "ProgressNote",
    "Regenerate",
    "SessionError",
    "Stop",
    "ToolCallEvent",
    "UserMessage",
    "UserMessageCommand",
    "decode_frame",
    "parse_command",
]


def check_move(current: Phase, new: Phase) -> None:
    """Raise ``PhaseError`` unless ``current`` may become ``new``: a move in the table, staying
    in the same phase, or ending the turn (``done``, from anywhere)."""
    if new == current or new == "done" or new in TRANSITIONS[current]:
        return
    raise PhaseError(f"a conversation cannot go from {current!r} to {new!r}")


MAX_USER_MESSAGE = 4000
_ID = Field(min_length=1, max_length=200)


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)


class UserMessage(_Event):
    """A user's message, echoed to every socket of the conversation."""

    type: Literal["user_message"] = "user_message"
    message_id: str
    content: str
    client_id: str | None = None  # the sender's own id for it (``UserMessageCommand``)
    title: str | None = None  # the conversation's title, when this message names it (its first)


class MessageQueued(_Event):
    """A user's message sent while a turn runs, kept to start the next turn (``queue``)."""

    type: Literal["message_queued"] = "message_queued"
    message_id: str  # the ``user_message`` event that starts its turn has the same id
    content: str
    client_id: str | None = None


class AssistantDelta(_Event):
    """A piece of the assistant's reply as it streams."""

    type: Literal["assistant_delta"] = "assistant_delta"
    message_id: str
    delta: str


class AssistantMessage(_Event):
    """The assistant's whole reply, once streamed."""

    type: Literal["assistant_message"] = "assistant_message"
    message_id: str
    content: str
    stopped: bool = False  # the user stopped it: ``content`` is what was shown until then


class ToolCallEvent(_Event):
    """A tool call started or ended (``status``)."""

    type: Literal["tool_call"] = "tool_call"
    call_id: str
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    status: Literal["running", "completed", "failed", "aborted", "denied"] = "running"
    result: Any = None
    error: str | None = None
    # Who aborted an ``aborted`` call: "user" (their own Abort), "operator <name>", "server".
    aborted_by: str = ""
    # A committed call (a payment received): what became of it, in words ("" if nothing
    # to say: not committed, or finished with no request to stop).
    commitment: str = ""
    # How an ended call ended, as a value (``chatbridge.calls.outcome``): what the card shows.
    outcome: Outcome | None = None


class ElicitStart(_Event):
    """A tool asked a question (before any form is shown)."""

    type: Literal["elicit_start"] = "elicit_start"
    session_id: str
    call_id: str
    elicit_id: str
    key: str
    message: str


class ElicitForm(_Event):
    """The form for a question, shown (again, with ``errors``) until it is answered."""

    type: Literal["elicit"] = "elicit"
    session_id: str
    call_id: str
    elicit_id: str
    tool_name: str
    key: str
    message: str
    requested_schema: dict[str, Any]
    context: dict[str, Any]
    errors: dict[str, list[str]] = Field(default_factory=dict)
    attempt: int = 1
    html: str = ""
    mode: Literal["form", "url"] = "form"
    url: str | None = None  # a URL question's one-time link: the page answers it
    # The earlier answers it offers to change, its Decline and Cancel (``author/exits.py``).
    exits: dict[str, Any] = Field(default_factory=dict)


class ElicitResponseAck(_Event):
    """An answer arrived for a question (a valid one is followed by ``elicit_complete``)."""

    type: Literal["elicit_response"] = "elicit_response"
    call_id: str
    elicit_id: str
    action: Literal["accept", "decline", "cancel"]


class ElicitComplete(_Event):
    """A question was answered validly (or declined/cancelled) and the tool goes on."""

    type: Literal["elicit_complete"] = "elicit_complete"
    call_id: str
    elicit_id: str
    # "change": left for an earlier question, asked again (``note`` names it)
    action: Literal["accept", "decline", "cancel", "change"]
    content: dict[str, Any] | None = None
    note: str | None = None  # e.g. why a question was cancelled


class LogLine(_Event):
    """A tool's log line."""

    type: Literal["log"] = "log"
    call_id: str
    level: str
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


class ProgressNote(_Event):
    """A tool's progress note."""

    type: Literal["progress"] = "progress"
    call_id: str
    message: str
    progress: float | None = None
    total: float | None = None


class SessionError(_Event):
    """A tool session could not be reached."""

    type: Literal["session_error"] = "session_error"
    session_id: str
    call_id: str
    error: Literal["SESSION_NOT_FOUND", "SESSION_ABORTED", "INTERNAL_ERROR"]
    message: str


class ApprovalRequest(_Event):
    """A tool call waits for the user to approve or deny it."""

    type: Literal["approval_request"] = "approval_request"
    call_id: str
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ConversationState(_Event):
    """Where the conversation's engine is, which questions are open, what awaits approval."""

    type: Literal["conversation_state"] = "conversation_state"
    conversation_id: str
    phase: Phase
    running: bool
    pending: list[str] = Field(default_factory=list)
    approvals: list[ApprovalRequest] = Field(default_factory=list)


class ConversationForked(_Event):
    """The conversation forked (a message edited and sent again, a reply regenerated): these
    messages and tool calls are an earlier version now, kept readable, never read by the
    model again. The new branch follows."""

    type: Literal["conversation_forked"] = "conversation_forked"
    messages: list[str]  # their ids, in order
    calls: list[str]  # the ids of their tool calls


class ErrorEvent(_Event):
    """A command was refused or failed; the socket stays usable."""

    type: Literal["error"] = "error"
    code: RefusalCode
    message: str


ChatEvent: TypeAlias = Annotated[
    UserMessage
    | MessageQueued
    | AssistantDelta
    | AssistantMessage
    | ToolCallEvent
    | ElicitStart
    | ElicitForm
    | ElicitResponseAck
    | ElicitComplete
    | LogLine
    | ProgressNote
    | SessionError
    | ApprovalRequest
    | ConversationState
    | ConversationForked
    | ErrorEvent,
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[ChatEvent] = TypeAdapter(ChatEvent)


class _Command(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UserMessageCommand(_Command):
    type: Literal["user_message"]
    text: str = Field(min_length=1, max_length=MAX_USER_MESSAGE)
    # Optional: echoed in the ``user_message`` (or ``message_queued``) event of this message.
    client_id: str | None = Field(default=None, min_length=1, max_length=100)
    # While a turn runs: keep the message and start the next turn with it (instead of BUSY).
    queue: bool = False


class ElicitResponseCommand(_Command):
    """An answer to the open question ``elicit_id``; with ``change``, instead of an answer:
    go back to that earlier question of the call (its id or key) and answer it again."""

    type: Literal["elicit_response"]
    session_id: str = _ID
    call_id: str = _ID
    elicit_id: str = _ID
    action: Literal["accept", "decline", "cancel"] = "accept"
    content: dict[str, Any] = Field(default_factory=dict)
    change: str = Field(default="", max_length=300)

    def given(self) -> tuple[str, dict[str, Any]]:
        """What it gave its question, to tell a copy of it (a double click) from another."""
        if self.change:
            return "change", {"change": self.change}
        return self.action, dict(self.content)


class Abort(_Command):
    type: Literal["abort"]
    session_id: str = _ID
    reason: str = Field(default="aborted by the user", max_length=500)


class Approve(_Command):
    type: Literal["approve"]
    call_id: str = _ID


class Deny(_Command):
    type: Literal["deny"]
    call_id: str = _ID
    reason: str = Field(default="", max_length=500)


class Stop(_Command):
    """Stop the reply the model is writing; the text shown so far stays (tools go on)."""

    type: Literal["stop"]


class EditMessage(_Command):
    """Send one of your earlier messages again, changed: the conversation forks there (what
    followed it is kept as an earlier version) and a new reply starts."""

    type: Literal["edit_message"]
    message_id: str = _ID
    text: str = Field(min_length=1, max_length=MAX_USER_MESSAGE)


class Regenerate(_Command):
    """Write the last reply again: it is kept as an earlier version."""

    type: Literal["regenerate"]
    message_id: str = _ID


Command: TypeAlias = Annotated[
    UserMessageCommand
    | ElicitResponseCommand
    | Abort
    | Approve
    | Deny
    | Stop
    | EditMessage
    | Regenerate,
    Field(discriminator="type"),
]
COMMAND_ADAPTER: TypeAdapter[Command] = TypeAdapter(Command)
COMMANDS = (
    "user_message",
    "elicit_response",
    "abort",
    "approve",
    "deny",
    "stop",
    "edit_message",
    "regenerate",
)


def parse_command(data: Any) -> Command:
    """Validate a decoded command (raises pydantic's ``ValidationError``)."""
    return COMMAND_ADAPTER.validate_python(data)


# -- frames: JSON as the protocol accepts it ----------------------------------------------

# \uD800-\uDFFF, any case: only text with such an escape can decode to a lone surrogate, so
# only that text (rare: json.dumps writes emoji as pairs like this) pays for the full check.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class NotStrictJson(ChatBridgeError, ValueError):
    """The text is not JSON the protocol accepts; the message says why."""


def _no_constants(name: str) -> Any:
    raise NotStrictJson(f"{name} is not a JSON number.")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        shown = literal if len(literal) <= 40 else f"{literal[:37]}..."
        raise NotStrictJson(f"the number {shown} is out of range; numbers must be finite.")
    return value


def decode_frame(text: str) -> Any:
    """Decode ``text``; ``NotStrictJson`` if it is not JSON, has a number that is not finite or
    a string with an unpaired surrogate."""
    try:
        value = json.loads(text, parse_constant=_no_constants, parse_float=_finite)
    except NotStrictJson:
        raise
    except RecursionError:
        raise NotStrictJson("it is nested too deeply.") from None
    except json.JSONDecodeError as exc:
        raise NotStrictJson(f"{exc}.") from None
    except ValueError:  # the only other one: Python's limit on integer digits
        limit = sys.get_int_max_str_digits()
        raise NotStrictJson(f"an integer has more than {limit} digits.") from None
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise NotStrictJson(
                "a string has an unpaired surrogate escape (\\uD800-\\uDFFF). Send characters "
                "as UTF-8, or escape them as complete surrogate pairs."
            ) from None
    return value
