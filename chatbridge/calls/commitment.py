"""Commitments: an answer that commits a call (a payment) and what no abort may undo.

A tool declares ``.commits(PAYMENT, compensate=refund)``. Once an accepted answer to that key is
on record (its page reported it, or its journal entry is written), the call is *committed*: an
abort (the chat's Abort, an operator, MCP cancel, ``tasks/cancel``, a client gone, expiry) no
longer stops the tool where it stands. The tool goes on to its end — it finishes what it
committed to — unless it reaches a question (the person who asked to stop is not there to
answer) or fails: then the compensation it declared runs, once, as a journaled step, and the
call ends saying so. A committed call a worker dropped (SIGTERM, kill -9, a lost database) is
resumed by another worker and finished the same way. Whoever asked to stop is told which.

``CommitmentGuard`` is the session's state of this (one per call); ``CommitmentNote`` is what
the terminal event says of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from chatbridge.author.elicit import ElicitResult
from chatbridge.author.tools import Commitment

__all__ = [
    "COMPENSATION_SCOPE",
    "AbortDecision",
    "CommitmentGuard",
    "CommitmentNote",
    "CommitmentOutcome",
    "abort_decision_text",
    "abort_requested",
]

# The journal scope of compensation steps: apart from the tool's own positions (branch scopes
# are digits), so a replay finds a compensation that ran wherever the tool stopped.
COMPENSATION_SCOPE = "compensate"

# What ``PluginSession.abort`` did: stopped the tool (not committed), lets it finish, stops it
# at its question to compensate, keeps its question open (committed, nothing to compensate
# with), or nothing (it had ended).
AbortDecision = Literal["aborted", "finishing", "compensating", "kept", "ended"]

# What became of a committed call: finished despite an abort request (or with none),
# compensated, or compensation impossible (failed, or none declared).
CommitmentOutcome = Literal["finished", "compensated", "compensation_failed", "not_compensated"]


@dataclass(frozen=True)
class CommitmentNote:
    """What a committed call's end says of its commitment (terminal events, records, hosts)."""

    key: str
    label: str
    outcome: CommitmentOutcome
    abort_by: str | None = None
    abort_reason: str | None = None
    compensation: Any = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CommitmentNote:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})

    def text(self) -> str:
        """In words for the person, the model and the MCP client."""
        what = self.label[:1].upper() + self.label[1:]
        asked = " after the request to stop" if self.abort_by is not None else ""
        if self.outcome == "finished":
            if self.abort_by is None:
                return ""
            return (
                f"{what} was already received, so the call could not be stopped; it was "
                f"finished{asked}."
            )
        if self.outcome == "compensated":
            return f"{what} was undone{asked}: {_plain(self.compensation)}."
        if self.outcome == "compensation_failed":
            return (
                f"{what} was received, the call could not finish, and undoing it failed "
                f"({self.error}); an operator must settle it."
            )
        return (
            f"{what} was received and the call could not finish; the tool declares no way to "
            "undo it, so an operator must settle it."
        )


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "done"
    return str(value) if value not in (None, "") else "done"


def abort_requested(record: dict[str, Any] | None) -> tuple[str, str | None] | None:
    """The request to stop a committed call kept on record (its row's ``commitment``)."""
    if not record or "abort_reason" not in record:
        return None
    return str(record["abort_reason"]), str(record.get("abort_by") or "") or None


def abort_decision_text(decision: AbortDecision, label: str) -> str:
    """What the one who asked to stop is told, when it did not simply stop."""
    what = label[:1].upper() + label[1:]
    if decision == "finishing":
        return f"{what} was already received, so this can no longer be stopped; finishing it."
    if decision == "compensating":
        return f"{what} was already received: stopping here and undoing it."
    if decision == "kept":
        return (
            f"{what} was already received, so this can no longer be stopped; its question "
            "stays open."
        )
    return ""


class CommitmentGuard:
    """One call's commitment: which answer committed it, and an abort asked for since."""

    __slots__ = ("abort", "answer", "commitment", "declared")  # one per call: no dict

    def __init__(self, declared: Mapping[str, Commitment]) -> None:
        self.declared = declared  # the tool's own (read only here): not copied per call
        self.commitment: Commitment | None = None
        self.answer: BaseModel | None = None
        self.abort: tuple[str, str | None] | None = None  # (reason, by) asked after commitment

    @property
    def committed(self) -> bool:
        return self.commitment is not None

    def commits(self, key: str, result: ElicitResult[Any]) -> bool:
        """Would this answer commit the call (the first accepted answer of a declared key)?"""
        return self.commitment is None and key in self.declared and result.accepted

    def observe(self, key: str, result: ElicitResult[Any]) -> bool:
        """Note an answer; True if it committed the call just now."""
        if not self.commits(key, result):
            return False
        self.commitment = self.declared[key]
        content = result.content
        self.answer = content if isinstance(content, BaseModel) else None
        return True

    def request_abort(self, reason: str, by: str | None) -> None:
        if self.abort is None:
            self.abort = (reason, by)

    def stops_at_question(self) -> bool:
        """Committed, asked to stop, and able to compensate: a question is where it stops."""
        return (
            self.abort is not None
            and self.commitment is not None
            and self.commitment.compensate is not None
        )

    def decision(self, asking: bool) -> AbortDecision:
        """What an abort does now to a committed call (``asking``: a question is open)."""
        assert self.commitment is not None
        if not asking:
            return "finishing"
        return "compensating" if self.commitment.compensate is not None else "kept"

    def note(
        self,
        outcome: CommitmentOutcome,
        *,
        compensation: Any = None,
        error: str | None = None,
    ) -> CommitmentNote:
        assert self.commitment is not None
        reason, by = self.abort if self.abort is not None else (None, None)
        return CommitmentNote(
            key=self.commitment.key,
            label=self.commitment.what,
            outcome=outcome,
            abort_by=(by or "") if self.abort is not None else None,
            abort_reason=reason,
            compensation=compensation,
            error=error,
        )
