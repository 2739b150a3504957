"""How a tool call ended, as a value (DESIGN §10: one outcome type).

The session that ran the call makes its ``Outcome`` once, from what it knows as a fact (the
tool returned, raised, was stopped by whom and why, its last question was declined), and every
reader takes it from there: the chat's card and the model's tool message, the admin, MCP
results, and the record (``ToolSession.outcome``) for a worker that finds the call ended. None
of them learns how a call ended by reading text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, assert_never

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from chatbridge.author.exceptions import TooManyRefusedAnswers

if TYPE_CHECKING:
    from chatbridge.calls.journal import JournalEntry

__all__ = [
    "BY_CLIENT",
    "BY_EXPIRY",
    "BY_REFUSED",
    "BY_SERVER",
    "BY_USER",
    "OPERATOR",
    "OUTCOME",
    "Aborted",
    "Cancelled",
    "Completed",
    "Declined",
    "Denied",
    "Failed",
    "Outcome",
    "RefusedAnswers",
    "Stopper",
    "aborted",
    "call_status",
    "completed",
    "describe",
    "failed",
    "stopper_of",
]

# Who stopped a call: its user (the chat's Abort), an operator (``who`` names them), the server
# (shutting down, a task's expiry while suspended), nobody answering in time (``expiry``), its
# MCP client (a cancellation), the transport (a question in a mode the client cannot take:
# ``refused``) or ChatBridge itself (a plugin's form failed: ``system``).
Stopper = Literal["user", "operator", "server", "expiry", "client", "refused", "system"]

# ``PluginSession.aborted_by``, the code on record (``ToolSession.aborted_by``) of who stopped a
# call; an operator's is "operator <name>". ``stopper_of`` is the one reader of these codes.
BY_USER = "user"
BY_SERVER = "server"
BY_EXPIRY = "expiry"
BY_CLIENT = "mcp-client"
BY_REFUSED = "mcp-modes"
OPERATOR = "operator "
_STOPPERS: dict[str, Stopper] = {
    BY_USER: "user",
    BY_SERVER: "server",
    BY_EXPIRY: "expiry",
    BY_CLIENT: "client",
    BY_REFUSED: "refused",
}


class _Outcome(BaseModel):
    model_config = ConfigDict(frozen=True)


class Completed(_Outcome):
    """The tool returned ``result``; ``done`` is false when the result's field the tool
    declared for it (``.done_when``) says it did not do its job."""

    kind: Literal["completed"] = "completed"
    result: Any = None
    done: bool = True


class Declined(_Outcome):
    """The tool returned ``result`` after the user declined its question ``key``."""

    kind: Literal["declined"] = "declined"
    key: str
    result: Any = None


class Cancelled(_Outcome):
    """The tool returned ``result`` after its question ``key`` was cancelled (dismissed, or
    nobody answered in time)."""

    kind: Literal["cancelled"] = "cancelled"
    key: str
    result: Any = None


class Denied(_Outcome):
    """The user did not allow the call (``.needs_approval()``); ``reason`` as they typed it."""

    kind: Literal["denied"] = "denied"
    reason: str = ""


class Aborted(_Outcome):
    """Stopped ``by`` someone (``who``: the operator's name) for ``reason`` (as given)."""

    kind: Literal["aborted"] = "aborted"
    by: Stopper
    who: str = ""
    reason: str = ""


class RefusedAnswers(_Outcome):
    """Why a call failed with ``TooManyRefusedAnswers``: its question ``key`` closed after
    ``count`` refused answers; ``why``: the last refusal's errors, in words for a person."""

    key: str
    count: int
    why: str = ""


class Failed(_Outcome):
    """The tool raised ``error_type`` with ``message`` (for logs and the admin); ``refused``:
    the answers to its question were refused as often as a question allows (the chat's card,
    the model's tool message and MCP results say so in words)."""

    kind: Literal["failed"] = "failed"
    error_type: str
    message: str
    refused: RefusedAnswers | None = None

    @property
    def error(self) -> str:
        return f"{self.error_type}: {self.message}" if self.error_type else self.message


Outcome: TypeAlias = Annotated[
    Completed | Declined | Cancelled | Denied | Aborted | Failed, Field(discriminator="kind")
]
OUTCOME: TypeAdapter[Outcome] = TypeAdapter(Outcome)
"""Reads an outcome back from its JSON form (``OUTCOME.validate_python(row.outcome)``)."""


def stopper_of(aborted_by: str | None) -> tuple[Stopper, str]:
    """Who an ``aborted_by`` code names: (the kind of stopper, the operator's name or "")."""
    code = aborted_by or ""
    if code.startswith(OPERATOR):
        return "operator", code.removeprefix(OPERATOR)
    return _STOPPERS.get(code, "system"), ""


def completed(
    result: Any, journal: Iterable[JournalEntry], done_field: str = ""
) -> Completed | Declined | Cancelled:
    """A tool that returned: declined (or cancelled) when the last thing it did was receive a
    Decline (a Cancel) to a question of its own (a fact of its journal, not of its result);
    else completed, and not done when the result's ``done_field`` (the tool's declaration,
    ``.done_when``) is false."""
    last = None
    for entry in journal:
        if entry.scope == "":
            last = entry
    if last is not None and last.kind == "elicit":
        action = last.result.get("action") if isinstance(last.result, dict) else None
        if action == "decline":
            return Declined(key=last.key, result=result)
        if action == "cancel":
            return Cancelled(key=last.key, result=result)
    done = not (done_field and isinstance(result, dict) and result.get(done_field) is False)
    return Completed(result=result, done=done)


def aborted(reason: str, aborted_by: str | None, denial: str | None) -> Denied | Aborted:
    """A call stopped: denied by its user (``denial``: their reason), or aborted."""
    if denial is not None:
        return Denied(reason=denial)
    by, who = stopper_of(aborted_by)
    return Aborted(by=by, who=who, reason=reason)


def failed(cause: BaseException | None, error: str) -> Failed:
    """A tool that raised ``cause``; without the exception (an event made elsewhere), its text
    ``error`` is kept whole as the message, not read back into a type."""
    if cause is None:
        return Failed(error_type="", message=error)
    refused = None
    if isinstance(cause, TooManyRefusedAnswers):
        refused = RefusedAnswers(key=cause.key, count=cause.refused, why=cause.why)
    return Failed(error_type=type(cause).__name__, message=str(cause), refused=refused)


def describe(outcome: Outcome) -> str:
    """The error text of an ended call, for its record, the admin and JSON clients ("" for a
    tool that returned): made from the outcome, never read back into one."""
    match outcome:
        case Completed() | Declined() | Cancelled():
            return ""
        case Failed():
            return outcome.error
        case Denied():
            return (
                f"Denied by the user: {outcome.reason}" if outcome.reason else "Denied by the user."
            )
        case Aborted(by="operator"):
            said = f"Aborted by {OPERATOR}{outcome.who}"
            return f"{said}: {outcome.reason}" if outcome.reason else said
        case Aborted():
            return outcome.reason
        case _:
            assert_never(outcome)


def call_status(outcome: Outcome) -> Literal["completed", "failed", "denied", "aborted"]:
    """The status a chat's tool card shows for ``outcome`` (its badge says more)."""
    match outcome:
        case Completed() | Declined() | Cancelled():
            return "completed"
        case Failed():
            return "failed"
        case Denied():
            return "denied"
        case Aborted():
            return "aborted"
        case _:
            assert_never(outcome)
