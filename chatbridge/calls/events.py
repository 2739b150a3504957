"""Events a ``PluginSession`` emits, read with ``await session.next_event()``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from chatbridge.author.elicit import ElicitRequest
from chatbridge.calls.commitment import CommitmentNote

__all__ = [
    "AbortedEvent",
    "CompletedEvent",
    "ElicitEvent",
    "FailedEvent",
    "LogEvent",
    "ProgressEvent",
    "SessionEvent",
    "TERMINAL_EVENTS",
]


@dataclass(frozen=True)
class ElicitEvent:
    """The tool asked a question and waits for ``respond_to_elicit``."""

    session_id: str
    request: ElicitRequest
    type: Literal["elicit"] = "elicit"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "session_id": self.session_id, **self.request.to_dict()}


@dataclass(frozen=True)
class LogEvent:
    """A log line from ``ctx.log``."""

    session_id: str
    level: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    type: Literal["log"] = "log"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "session_id": self.session_id,
            "level": self.level,
            "message": self.message,
            "data": self.data,
        }


@dataclass(frozen=True)
class ProgressEvent:
    """A progress note from ``ctx.notify``."""

    session_id: str
    message: str
    progress: float | None = None
    total: float | None = None
    type: Literal["progress"] = "progress"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "session_id": self.session_id,
            "message": self.message,
            "progress": self.progress,
            "total": self.total,
        }


@dataclass(frozen=True)
class CompletedEvent:
    """The tool returned; ``result`` is its JSON-serialisable value."""

    session_id: str
    result: Any
    type: Literal["completed"] = "completed"
    commitment: CommitmentNote | None = None  # committed, finished despite a request to stop

    def to_dict(self) -> dict[str, Any]:
        data = {"type": self.type, "session_id": self.session_id, "result": self.result}
        return _with_commitment(data, self.commitment)


@dataclass(frozen=True)
class FailedEvent:
    """The tool raised; ``error`` is ``"ExceptionType: message"``."""

    session_id: str
    error: str
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    type: Literal["failed"] = "failed"
    commitment: CommitmentNote | None = None  # committed: what its compensation did

    def to_dict(self) -> dict[str, Any]:
        data = {"type": self.type, "session_id": self.session_id, "error": self.error}
        return _with_commitment(data, self.commitment)


@dataclass(frozen=True)
class AbortedEvent:
    """The session was aborted (by a user, an operator or the idle timeout)."""

    session_id: str
    reason: str
    type: Literal["aborted"] = "aborted"
    commitment: CommitmentNote | None = None  # committed: stopped at a question, compensated

    def to_dict(self) -> dict[str, Any]:
        data = {"type": self.type, "session_id": self.session_id, "reason": self.reason}
        return _with_commitment(data, self.commitment)


def _with_commitment(data: dict[str, Any], note: CommitmentNote | None) -> dict[str, Any]:
    if note is not None:
        data["commitment"] = note.to_dict()
    return data


SessionEvent: TypeAlias = (
    ElicitEvent | LogEvent | ProgressEvent | CompletedEvent | FailedEvent | AbortedEvent
)
TERMINAL_EVENTS = frozenset({"completed", "failed", "aborted"})
