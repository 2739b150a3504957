"""Running a committed call's compensation (``.commits(key, compensate=...)``) as a step.

The compensation is journaled in a scope of its own (``COMPENSATION_SCOPE``), so it runs once
per call however often the call is resumed: a replay finds it on record.
"""

from __future__ import annotations

import logging

from chatbridge.calls.commitment import COMPENSATION_SCOPE, CommitmentGuard, CommitmentNote
from chatbridge.calls.context import CallContext, CallState

__all__ = ["compensate"]

logger = logging.getLogger("chatbridge.sessions")


async def compensate(state: CallState, guard: CommitmentGuard) -> CommitmentNote:
    """Undo the commitment of a call that cannot finish; what became of it, in a note."""
    commitment = guard.commitment
    assert commitment is not None, "only a committed call compensates"
    if commitment.compensate is None:
        logger.error("call %s committed %s and cannot finish", state.call_id, commitment.key)
        return guard.note("not_compensated")
    stopped_by, state.aborted = state.aborted, None  # the step runs although the call stopped
    try:
        ctx = CallContext(state, 0, COMPENSATION_SCOPE)
        value = await ctx.step(f"compensate_{commitment.key}", commitment.compensate, guard.answer)
    except Exception as exc:
        logger.exception("compensating %s of call %s failed", commitment.key, state.call_id)
        return guard.note("compensation_failed", error=f"{type(exc).__name__}: {exc}")
    finally:
        state.aborted = stopped_by
    logger.info("call %s: %s compensated (%r)", state.call_id, commitment.key, value)
    return guard.note("compensated", compensation=value)
