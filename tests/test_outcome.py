"""How a call ended is made once, from facts (chatbridge.calls.outcome): declined or cancelled
only when the tool's last act was receiving that answer, who stopped it from the code on record,
and the words every reader shows are made from it, never read back."""

from __future__ import annotations

from chatbridge.calls.journal import JournalEntry
from chatbridge.calls.outcome import (
    Aborted,
    Cancelled,
    Completed,
    Declined,
    Denied,
    aborted,
    completed,
    describe,
    failed,
)


def elicit(seq: int, key: str, action: str, scope: str = "") -> JournalEntry:
    return JournalEntry(seq, "elicit", key, {"action": action}, scope, seq, "")


def test_declined_and_cancelled_are_facts_of_the_journal() -> None:
    result = {"booked": False}
    seat_declined = [elicit(1, "pick_flight", "accept"), elicit(2, "pick_seat", "decline")]
    assert completed(result, seat_declined) == Declined(key="pick_seat", result=result)
    assert completed(result, [elicit(1, "payment", "cancel")]) == Cancelled(
        key="payment", result=result
    )
    # A decline the tool went on from (another question, a step after it) is not its end.
    went_on = [*seat_declined, JournalEntry(3, "step", "hold", {}, "", 3, "")]
    assert completed(result, went_on) == Completed(result=result)
    # A branch's entries are not the tool's own questions.
    assert completed(result, [elicit(1, "pick_seat", "decline", scope="b1")]) == Completed(
        result=result
    )


def test_who_stopped_a_call_and_the_words_made_from_it() -> None:
    ops = aborted("maintenance", "operator ops", None)
    assert ops == Aborted(by="operator", who="ops", reason="maintenance")
    assert describe(ops) == "Aborted by operator ops: maintenance"
    assert aborted("bye", "mcp-client", None) == Aborted(by="client", reason="bye")
    assert aborted("x", "someone new", None) == Aborted(by="system", reason="x")
    assert describe(aborted("", "approval", "too pricey")) == "Denied by the user: too pricey"
    assert aborted("", "approval", "") == Denied(reason="")
    assert describe(failed(KeyError("seat"), "")) == "KeyError: 'seat'"
    assert describe(failed(None, "boom: it broke")) == "boom: it broke"  # kept whole
