"""A conversation's phase changes through one table (chatbridge.engine.protocol): a turn's moves
pass, a move the table does not hold raises."""

from __future__ import annotations

import pytest

from chatbridge.engine.protocol import TRANSITIONS, PhaseError, check_move

TURN = [
    "idle",
    "process_plugin_abort",
    "process_plugin_responses",
    "start_iteration",
    "streaming",
    "executing_tools",
    "plugin_awaiting_elicit",
    "awaiting_approval",
    "executing_tools",
    "start_iteration",
    "streaming",
    "done",
    "executing_tools",  # the next turn resumes a suspended call first
    "process_plugin_abort",
]


def test_a_turns_moves_are_in_the_table() -> None:
    for current, new in zip(TURN, TURN[1:], strict=False):
        check_move(current, new)  # type: ignore[arg-type]


def test_every_phase_may_end_the_turn_and_has_its_row() -> None:
    for phase in TRANSITIONS:
        check_move(phase, "done")
    assert set(TRANSITIONS) == {*TURN, "done"}


@pytest.mark.parametrize(
    ("current", "new"),
    [("idle", "streaming"), ("streaming", "plugin_awaiting_elicit"), ("done", "start_iteration")],
)
def test_a_move_the_table_does_not_hold_raises(current: str, new: str) -> None:
    with pytest.raises(PhaseError, match=f"cannot go from '{current}' to '{new}'"):
        check_move(current, new)  # type: ignore[arg-type]
