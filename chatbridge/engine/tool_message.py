"""What the model is told when a tool call ends (DESIGN §5): its tool message, made from the
call's ``Outcome`` (``chatbridge.calls.outcome``).

A call a person ended on purpose is said as it happened, so that no model apologises for an
error or starts the call again; a tool's exception is for logs and the admin, and the model is
asked not to quote it to people.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, assert_never

from chatbridge.calls.outcome import (
    Aborted,
    Cancelled,
    Completed,
    Declined,
    Denied,
    Failed,
    Outcome,
    RefusedAnswers,
)

__all__ = [
    "DENIED_PREFIX",
    "NOT_QUOTED",
    "OPERATOR_PREFIX",
    "REFUSED_PREFIX",
    "USER_STOPPED_PREFIX",
    "ToolReply",
    "failed_reply",
    "tool_message",
]

USER_STOPPED_PREFIX = "Stopped by the user:"
DENIED_PREFIX = "Denied by the user:"
OPERATOR_PREFIX = "Stopped by an operator:"
REFUSED_PREFIX = "Answer refused:"
NOT_QUOTED = " (Tell the user in plain words that it did not work; do not quote this error.)"
# What the chat's Abort sends when the user typed no reason: not worth repeating to the model.
_NO_REASON = ("aborted by the user", "aborted")


@dataclass(frozen=True)
class ToolReply:
    """A tool call's end in the conversation: the tool message the model reads (``content``)
    and, beside it on record, the call's ``outcome``, which the page shows when the call has
    no session row of its own. Nobody reads an outcome back from ``content``."""

    content: str
    outcome: Outcome

    def message(self, call_id: str) -> dict[str, Any]:
        """The tool message to append (the store keeps ``outcome`` off what the model reads)."""
        return {
            "role": "tool",
            "tool_call_id": call_id,
            "content": self.content,
            "outcome": self.outcome.model_dump(mode="json"),
        }


def failed_reply(why: str, error_type: str = "") -> ToolReply:
    """A call that ended without an outcome of its session's: it never had one (an unknown
    tool, arguments that are not valid), its session was lost, or the server failed running
    it. The model is told ``Error: why``."""
    return ToolReply(f"Error: {why}", Failed(error_type=error_type, message=why))


def _their(reason: str) -> str:
    reason = reason.strip(" :.")
    return f" (their reason: {reason})" if reason and reason.lower() not in _NO_REASON else ""


def _refused(refused: RefusedAnswers) -> str:
    """A question closed after its answers were refused as often as it takes: the user's
    doing, not a bug, so the model says why rather than apologise for an error."""
    times = "once" if refused.count == 1 else f"{refused.count} times"
    last = f" Last refusal: {refused.why}." if refused.why else ""
    return (
        f"{REFUSED_PREFIX} the user's answer to {refused.key!r} was refused {times}, as often "
        f"as a question allows, so the tool call ended without finishing.{last} Tell the user "
        "why in plain words; do not call the tool again unless they ask."
    )


def tool_message(outcome: Outcome, commitment: str = "") -> str:
    """The tool message for ``outcome``; ``commitment``: what became of a committed call, in
    words, which the model passes on to the user."""
    match outcome:
        case Completed() | Declined() | Cancelled():
            message = json.dumps(outcome.result, ensure_ascii=False)
        case Failed(refused=RefusedAnswers() as refused):
            message = _refused(refused)
        case Failed():
            message = f"Error: The tool failed: {outcome.error}{NOT_QUOTED}"
        case Denied():
            message = (
                f"{DENIED_PREFIX} the user did not allow this tool call"
                f"{_their(outcome.reason)}. Do not retry unless they ask."
            )
        case Aborted(by="user"):
            message = (
                f"{USER_STOPPED_PREFIX} the user stopped this tool call themselves"
                f"{_their(outcome.reason)}. Do not retry unless they ask."
            )
        case Aborted(by="operator"):
            message = (
                f"{OPERATOR_PREFIX} an operator ended this tool call on purpose"
                f"{_their(outcome.reason)}. Do not retry it; tell the user it was stopped."
            )
        case Aborted():
            message = f"Error: The tool call was aborted: {outcome.reason}"
        case _:
            assert_never(outcome)
    return f"{message}\n\n{commitment}" if commitment else message
