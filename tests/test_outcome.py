"""How a call ended is made once, from facts (chatbridge.calls.outcome): declined or cancelled
only when the tool's last act was receiving that answer, who stopped it from the code on record,
and the words every reader shows are made from it, never read back."""

from __future__ import annotations

import mcp_types as types

from chatbridge import TooManyRefusedAnswers
from chatbridge.calls.journal import JournalEntry
from chatbridge.calls.outcome import (
    OUTCOME,
    Aborted,
    Cancelled,
    Completed,
    Declined,
    Denied,
    Failed,
    RefusedAnswers,
    aborted,
    call_status,
    completed,
    describe,
    failed,
)
from chatbridge.engine.tool_message import tool_message
from chatbridge.mcp.results import final_result


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


REFUSED = (
    "The answer to 'pick_seat' was refused 5 times, as often as a question allows, so the "
    "question was closed and the call failed. Last refusal: Row: Enter a number from 1 to 99. "
    "Call the tool again to start over."
)


def test_a_question_refused_too_often_is_a_failure_that_says_so_to_every_reader() -> None:
    closed = TooManyRefusedAnswers(
        "book_flight:pick_seat:c1:2", "pick_seat", 5, {"row": ["Enter a number from 1 to 99."]}
    )
    outcome = failed(closed, "")
    assert outcome == Failed(
        error_type="TooManyRefusedAnswers",
        message=REFUSED,
        refused=RefusedAnswers(key="pick_seat", count=5, why="Row: Enter a number from 1 to 99"),
    )
    assert call_status(outcome) == "failed"
    assert describe(outcome) == f"TooManyRefusedAnswers: {REFUSED}"  # the record, the admin
    assert OUTCOME.validate_python(outcome.model_dump(mode="json")) == outcome  # read back
    # An MCP client (any path, Tasks too) gets the sentence, not "unexpected" nor "denied".
    said = final_result(outcome)
    assert said.is_error and said.content == [types.TextContent(type="text", text=REFUSED)]
    assert tool_message(outcome) == (
        "Answer refused: the user's answer to 'pick_seat' was refused 5 times, as often as a "
        "question allows, so the tool call ended without finishing. Last refusal: Row: Enter a "
        "number from 1 to 99. Tell the user why in plain words; do not call the tool again "
        "unless they ask."
    )
    once = failed(TooManyRefusedAnswers("x:k:c:1", "k", 1, {}), "")
    assert once.message == (
        "The answer to 'k' was refused once, as often as a question allows, so the question was "
        "closed and the call failed. Call the tool again to start over."
    )
