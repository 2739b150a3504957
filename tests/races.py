"""The race harness of commitments: a payment page answered while someone stops the booking.

Every trial books a flight up to its payment question, then races the page's POST (a test
card) against an abort by one path, ``offset`` seconds apart (negative: the abort first).
What the record says afterwards is checked against what each party was told:

- the page said "Payment received" exactly when the payment is on record (its link completed);
- a paid booking has one ticket and no refund (it finished), or no ticket and one refund (its
  compensation ran, and the call's end says "compensated");
- a booking not paid has neither, and ended stopped;
- the one who asked to stop was told the truth: stopped when not paid, "already received"
  when paid (chat refusal ``COMMITTED``, an operator's reply, an MCP log notification).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

Told = Literal["committed", "stopped"] | None

# Trials per abort path: a few dozen in `make test`, hundreds with `make race`.
TRIALS = int(os.environ.get("CHATBRIDGE_RACE_TRIALS", "30"))


def offsets(trials: int = TRIALS, seed: int = 25) -> list[float]:
    """Offsets of the abort against the page's POST, seconds: both sides of it, dense near
    zero, where the payment and the abort land in the same few milliseconds."""
    rng = random.Random(seed)
    near = [rng.uniform(-0.004, 0.012) for _ in range(trials * 2 // 3)]
    far = [rng.uniform(-0.03, 0.06) for _ in range(trials - len(near))]
    return [0.0, *near, *far][:trials]


@dataclass(frozen=True)
class Record:
    """What the database keeps of a trial's call."""

    call_id: str
    paid: bool  # the payment link completed: the card was taken
    tickets: int  # issue_ticket steps on record
    refunds: int  # compensate_payment steps on record
    status: str
    commitment: dict[str, Any] | None
    booked: bool | None = None  # the tool's own word, when it completed


@dataclass
class Tally:
    """Outcomes of a run of trials, and the inconsistent ones with why."""

    outcomes: Counter[str] = field(default_factory=Counter)
    inconsistent: list[str] = field(default_factory=list)

    def add(self, record: Record, page_said_paid: bool, told: Told, said: str = "") -> None:
        """One trial; ``said``: the words the one who asked to stop got, kept for a failure."""
        why = inconsistency(record, page_said_paid, told)
        if why is not None:
            self.inconsistent.append(f"{record.call_id}: {why} ({said or 'nothing said'})")
        self.outcomes[outcome(record)] += 1


def outcome(record: Record) -> str:
    if not record.paid:
        return "stopped before payment"
    if record.refunds:
        return "paid, then refunded"
    return "paid and ticketed"


def inconsistency(record: Record, page_said_paid: bool, told: Told) -> str | None:
    """Why this trial's record contradicts itself or what someone was told; None if it holds.

    ``told``: what the one who asked to stop heard — "committed" (already received: it goes
    on), "stopped", or None (nothing: the call had ended, or the path tells nobody)."""
    if page_said_paid != record.paid:
        return f"the page said paid={page_said_paid} but the record says paid={record.paid}"
    if record.paid:
        note = record.commitment or {}
        if (record.tickets, record.refunds) == (1, 0):
            if record.status != "completed":
                return f"ticketed but the call ended {record.status}"
        elif (record.tickets, record.refunds) == (0, 1):
            if note.get("outcome") != "compensated":
                return f"refunded but the call's end says {note!r}"
        else:
            return f"paid with {record.tickets} ticket(s) and {record.refunds} refund(s)"
        if told == "stopped" and record.refunds == 0:
            return "paid and ticketed, but the one who asked to stop was told it stopped"
    else:
        if record.tickets or record.refunds:
            return f"not paid, yet {record.tickets} ticket(s), {record.refunds} refund(s)"
        if record.status != "aborted" and record.booked is not False:
            return f"not paid and asked to stop, yet it ended {record.status}"
        if told == "committed":
            return "not paid, but the one who asked to stop was told it was"
    return None
