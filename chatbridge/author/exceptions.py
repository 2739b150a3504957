"""Every error ChatBridge raises, under one base class.

Each exception keeps the facts as attributes and builds its message from them: what was
expected, what arrived, and how to fix it where there is a fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, cast, get_args

from chatbridge.author.human import HumanText, field_label, pydantic_messages

__all__ = [
    "ChangeRefused",
    "ChatBridgeError",
    "ClaimLost",
    "CommandRefused",
    "DuplicateSession",
    "ElicitAlreadyPending",
    "ElicitInBranch",
    "ElicitNotPending",
    "ElicitValidationError",
    "InvalidToolParams",
    "JournalWriteFailed",
    "LinkUnusable",
    "NotSerializable",
    "RefusalCode",
    "PluginDefinitionError",
    "ReplayDivergence",
    "SamplingError",
    "SessionAborted",
    "SessionNotFound",
    "StepOutcomeUnknown",
    "TooManyRefusedAnswers",
    "ToolDefinitionError",
    "UnknownElicitKey",
    "UrlQuestionsUnavailable",
    "field_errors_text",
    "format_errors",
    "parse_refusal_code",
    "refusal_text",
    "technical_errors",
]


def _keys(keys: Iterable[str]) -> str:
    return ", ".join(sorted(keys)) or "(none)"


def format_errors(errors: Sequence[Mapping[str, Any]]) -> str:
    """Render pydantic error dicts as ``field: message; ...``."""
    parts = []
    for err in errors:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def field_errors_text(errors: Mapping[str, Sequence[str]]) -> str:
    """Errors grouped by field (``__all__`` for the whole) for a person: each message after
    its field's label ("Email: Enter an email address like name@example.com")."""
    parts = []
    for field, messages in errors.items():
        for message in messages:
            label = getattr(message, "label", "") or field_label(field)
            text = str(message).rstrip(". ")
            parts.append(text if field == "__all__" else f"{label}: {text}")
    return "; ".join(parts)


def technical_errors(errors: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """The technical text behind each message of ``errors`` (for logs and the record)."""
    return {
        field: [str(getattr(m, "technical", m)) for m in messages]
        for field, messages in errors.items()
    }


def refusal_text(detail: str) -> str:
    """What every transport tells whoever answered when it refuses the answer and asks again
    (DESIGN §9: the same answers refused with the same message)."""
    return f"Your previous answer was not accepted. {detail}. Please try again."


class ChatBridgeError(Exception):
    """Base class of every ChatBridge error."""


# Why a command was refused or failed: ``CommandRefused.code`` and the chat's ``error`` event.
RefusalCode = Literal[
    # the conversation or its call refused the command
    "ALREADY_ANSWERED",  # the question or approval was settled another way first
    "CHANGE_REFUSED",  # an earlier answer that cannot be changed (a step ran after it)
    "BUSY",  # a reply is running
    "CLOSED",  # the call has ended
    "COMMITTED",  # an abort of a call that has committed (it finishes instead)
    "NOT_FOUND",  # no such call or approval in this conversation
    "NOT_WAITING",  # the question is not open
    "QUEUE_FULL",  # too many messages waiting for the running reply
    "SHUTTING_DOWN",  # the server is draining
    "STALE_ELICIT",  # an answer to a form that is no longer the one shown
    "TOO_MANY_RUNNING",  # the visitor's cap on busy chats
    "UNREACHABLE",  # the worker holding the call is alive but cannot be reached
    # the socket refused what arrived, or the server failed
    "BAD_COMMAND",
    "BAD_JSON",
    "BAD_TEXT",
    "INTERNAL_ERROR",
    "LLM_ERROR",
    "RATE_LIMITED",
    "REFUSED",
    "TOO_LARGE",
    "TOO_LONG",
    "TOO_MANY_SOCKETS",  # the visitor's or the client address's open sockets are at the cap
    "UNAVAILABLE",
]
_REFUSAL_CODES: frozenset[str] = frozenset(get_args(RefusalCode))


def parse_refusal_code(value: object) -> RefusalCode:
    """``value`` (a code that came from another worker) as a ``RefusalCode``; "REFUSED" for
    one this version does not know."""
    return cast(RefusalCode, value) if value in _REFUSAL_CODES else "REFUSED"


class CommandRefused(ChatBridgeError):
    """A command cannot be carried out; ``code`` says why, for programs."""

    def __init__(self, code: RefusalCode, message: str) -> None:
        self.code: RefusalCode = code
        super().__init__(message)


class ToolDefinitionError(ChatBridgeError):
    """A tool was built with a mistake in its definition."""


class PluginDefinitionError(ChatBridgeError):
    """A plugin's handlers do not match its tool's declared elicitation keys."""

    def __init__(
        self,
        tool: str,
        *,
        missing: Iterable[str] = (),
        extra: Iterable[str] = (),
        detail: str | None = None,
    ) -> None:
        self.tool = tool
        self.missing = sorted(missing)
        self.extra = sorted(extra)
        parts = []
        if self.missing:
            parts.append(f"missing on_elicit handlers for {_keys(self.missing)}")
        if self.extra:
            parts.append(f"handlers for undeclared keys {_keys(self.extra)}")
        if detail:
            parts.append(detail)
        super().__init__(
            f"Plugin for tool {tool!r}: {'; '.join(parts)}. "
            "Provide exactly one async handler per key declared in .elicits()."
            if self.missing or self.extra
            else f"Plugin for tool {tool!r}: {'; '.join(parts)}."
        )


class UnknownElicitKey(ChatBridgeError):
    """A tool elicited a key it did not declare."""

    def __init__(self, tool: str, key: str, declared: Iterable[str]) -> None:
        self.tool, self.key = tool, key
        self.declared = sorted(declared)
        super().__init__(
            f"Tool {tool!r} elicited {key!r}, which it did not declare; "
            f"declared keys: {_keys(self.declared)}. Add it to .elicits()."
        )


class ElicitInBranch(ChatBridgeError):
    """``ctx.elicit`` was called inside ``ctx.branch``."""

    def __init__(self, tool: str, key: str, depth: int) -> None:
        self.tool, self.key, self.depth = tool, key, depth
        super().__init__(
            f"Tool {tool!r} elicited {key!r} inside a branch (depth {depth}); "
            "branches are sub-agent computations and cannot ask the user. "
            "Elicit in the tool body (depth 0) and pass the answer into the branch."
        )


class ElicitAlreadyPending(ChatBridgeError):
    """A second elicitation was started while one is pending in the same tool call."""

    def __init__(self, tool: str, key: str, pending: str) -> None:
        self.tool, self.key, self.pending = tool, key, pending
        super().__init__(
            f"Tool {tool!r} elicited {key!r} while elicitation {pending} is still pending; "
            "a tool call has at most one pending elicitation. Await each ctx.elicit() "
            "before starting the next."
        )


class ElicitValidationError(ChatBridgeError):
    """An answer's content does not match the key's response model."""

    def __init__(
        self,
        elicit_id: str,
        model: str,
        errors: Sequence[Mapping[str, Any]],
        human: Sequence[str] | None = None,
    ) -> None:
        self.elicit_id, self.model = elicit_id, model
        self.errors = [dict(e) for e in errors]
        # What a person reads for each error (``chatbridge.author.human``); the technical text
        # stays in ``errors`` and in this exception's message.
        self.human = list(human) if human is not None and len(human) == len(errors) else None
        super().__init__(
            f"Answer to {elicit_id} does not match {model}: {format_errors(self.errors)}. "
            "The elicitation is still pending; answer it again with valid content."
        )

    def field_errors(self) -> dict[str, list[str]]:
        """Errors grouped by top-level field name (``__all__`` for whole-form errors), in
        words for a person; each message's ``technical`` attribute keeps pydantic's text."""
        human = self.human or pydantic_messages(self.errors)
        out: dict[str, list[str]] = {}
        for err, text in zip(self.errors, human, strict=True):
            loc = err.get("loc") or ()
            field = str(loc[0]) if loc else "__all__"
            technical = str(err.get("msg", "invalid"))
            label = getattr(text, "label", "")
            out.setdefault(field, []).append(HumanText(str(text), technical, label))
        return out


class TooManyRefusedAnswers(ChatBridgeError):
    """The answers to a question were refused as often as a question allows
    (``CHATBRIDGE_MAX_REFUSED_ANSWERS``): the question closed by itself and the call fails.
    Raised in the tool where it asked, and to whoever handed in the last refused answer."""

    def __init__(
        self, elicit_id: str, key: str, refused: int, errors: Mapping[str, Sequence[str]]
    ) -> None:
        self.elicit_id, self.key, self.refused = elicit_id, key, refused
        # The last refusal's field errors, in words for a person (``HumanText`` kept).
        self.errors = {field: list(messages) for field, messages in errors.items()}
        times = "once" if refused == 1 else f"{refused} times"
        last = f" Last refusal: {self.why}." if self.why else ""
        super().__init__(
            f"The answer to {key!r} was refused {times}, as often as a question allows, so the "
            f"question was closed and the call failed.{last} Call the tool again to start over."
        )

    @property
    def why(self) -> str:
        """The last refusal's errors, in words ("Row: Enter a number from 1 to 99")."""
        return field_errors_text(self.errors)


class ElicitNotPending(ChatBridgeError):
    """An answer named an elicitation that is not the pending one."""

    def __init__(self, session_id: str, elicit_id: str, pending: str | None) -> None:
        self.session_id, self.elicit_id, self.pending = session_id, elicit_id, pending
        now = f"the pending one is {pending}" if pending else "nothing is pending"
        super().__init__(
            f"Session {session_id!r} has no pending elicitation {elicit_id}; {now}. "
            "Answers are accepted once, for the question currently asked."
        )


class ChangeRefused(ChatBridgeError):
    """An earlier answer cannot be changed (``PluginSession.change``); the message says why,
    in words for the person who asked."""

    def __init__(self, session_id: str, target: str, reason: str) -> None:
        self.session_id, self.target = session_id, target
        super().__init__(reason)


class InvalidToolParams(ChatBridgeError):
    """Tool arguments do not match the tool's parameters model."""

    def __init__(self, tool: str, errors: Sequence[Mapping[str, Any]]) -> None:
        self.tool = tool
        self.errors = [dict(e) for e in errors]
        super().__init__(
            f"Invalid arguments for tool {tool!r}: {format_errors(self.errors)}. "
            "Call it again with arguments matching its parameters schema."
        )


class NotSerializable(ChatBridgeError, TypeError):
    """A value that must travel or be journaled is not JSON-serialisable."""

    def __init__(self, what: str, value: object, reason: str) -> None:
        self.what = what
        super().__init__(
            f"{what} must be JSON-serialisable, got {type(value).__name__}: {reason}. "
            "Return plain dicts, lists, strings, numbers, booleans, None or pydantic models."
        )


class SamplingError(ChatBridgeError):
    """The LLM call behind ``ctx.sample`` failed."""

    def __init__(self, model: str, cause: BaseException) -> None:
        self.model = model
        super().__init__(f"Sampling with model {model!r} failed: {type(cause).__name__}: {cause}")


class SessionNotFound(ChatBridgeError):
    """No live session has this id."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"No plugin session {session_id!r}: it finished, was aborted, or was lost "
            "(for example in a restart). Retry the operation."
        )


class DuplicateSession(ChatBridgeError):
    """A session with this call id is already live."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"A plugin session {session_id!r} is already running; "
            "each tool call id starts one session."
        )


class SessionAborted(ChatBridgeError):
    """The session was aborted; raised inside the tool at its await point."""

    def __init__(self, session_id: str, reason: str) -> None:
        self.session_id, self.reason = session_id, reason
        super().__init__(f"Session {session_id!r} was aborted: {reason}")


class ReplayDivergence(ChatBridgeError):
    """A replayed tool made a different capability call than the journal recorded."""

    def __init__(self, tool: str, scope: str, pos: int, recorded: str, attempted: str) -> None:
        self.tool, self.scope, self.pos = tool, scope, pos
        self.recorded, self.attempted = recorded, attempted
        where = "the tool body" if scope == "" else f"branch {scope}"
        super().__init__(
            f"Replay of tool {tool!r} diverged at position {pos} of {where}: the journal "
            f"recorded {recorded}, the tool now called {attempted}. Apart from ctx calls and "
            "ctx.step, a tool must be deterministic; wrap other side effects in ctx.step()."
        )


class StepOutcomeUnknown(ChatBridgeError):
    """A step started on an earlier run of the call and its result was never recorded; its
    function takes no ``idempotency_key``, so it is not run again (it may have happened)."""

    def __init__(self, tool: str, step: str, key: str) -> None:
        self.tool, self.step, self.key = tool, step, key
        super().__init__(
            f"Step {step!r} of tool {tool!r} started before the call was interrupted and its "
            f"result was never recorded, so it may or may not have happened (idempotency key "
            f"{key!r}). It is not run again: give the step function an idempotency_key "
            "parameter and make it idempotent by that key (ctx.step passes the same key on "
            "every run), or catch StepOutcomeUnknown in the tool and settle it by the key."
        )


class JournalWriteFailed(ChatBridgeError):
    """A capability result could not be made durable, so the call was stopped."""

    def __init__(self, session_id: str, cause: str) -> None:
        self.session_id, self.cause = session_id, cause
        super().__init__(
            f"The answer could not be recorded ({cause}); the call was stopped so it never "
            "acts on an answer that is not on record."
        )


class ClaimLost(ChatBridgeError):
    """Another worker took the call over; this worker's copy must stop."""

    def __init__(self, session_id: str, worker: str, holder: str) -> None:
        self.session_id, self.worker, self.holder = session_id, worker, holder
        super().__init__(
            f"Another worker took this call over ({holder or 'nobody'} holds call "
            f"{session_id!r}, not {worker}); this copy stopped so that only the holder acts on the "
            "call."
        )


class UrlQuestionsUnavailable(ChatBridgeError):
    """A tool asked a URL question where nothing hands out links for them."""

    def __init__(self, tool: str, key: str) -> None:
        self.tool, self.key = tool, key
        super().__init__(
            f"Tool {tool!r} asked {key!r} as a URL question, but this server has no links for "
            "them; give the SessionManager url_links=..."
        )


class LinkUnusable(ChatBridgeError):
    """A URL question's link cannot be used (unknown, expired, or already used)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        messages = {
            "unknown": "This link is not valid.",
            "expired": "This link has expired. Open it from the chat it was sent to (that "
            "chat gets a fresh link while the question is open), or ask again.",
            "used": "This link was already used; the question it belonged to is closed.",
            "closed": (
                "The question of this link was closed (stopped, or answered another way) "
                "before your answer arrived: nothing you entered here was used."
            ),
        }
        super().__init__(messages.get(reason, reason))
