"""Ending on record a live call that no running worker holds (its process is gone).

An operator's abort (``chatbridge.chat.operations``) and a revoked MCP token
(``chatbridge.records.mcp_tokens``) end such a call here, through its lease: a compare-and-set
on the gone holder, so one ender wins, and never a committed call (its request to stop is kept
for the worker that resumes it)."""

from __future__ import annotations

import uuid
from typing import Literal

from django.utils import timezone

from chatbridge.calls.outcome import Outcome, aborted, describe
from chatbridge.engine.tool_message import ToolReply, tool_message
from chatbridge.records import lease
from chatbridge.records.models import ACTIVE_STATUSES, Message, ToolSession, aborted_row
from chatbridge.records.store import append_message

__all__ = ["Unheld", "end_unheld"]

Unheld = Literal["ended", "committed", "left"]


def end_unheld(call_id: str, holder: str, *, by: str, reason: str) -> Unheld:
    """End a live call whose holder, ``holder``, is gone: aborted ``by`` for ``reason``, on
    record through its lease (a compare-and-set on that holder, so one ender wins, and never a
    committed call). A committed one keeps the request to stop instead ("committed"): the
    worker that resumes it finishes it, or runs its compensation. "left": it is no longer live,
    or another worker took it over meanwhile (that worker aborts it)."""
    outcome = aborted(reason, by, None)
    error = f"{describe(outcome)} (no running worker held it)"
    row = aborted_row(by=by, error=error, now=timezone.now(), outcome=outcome)
    if lease.end(call_id, holder, {**row, "abort_reason": reason}):
        found = ToolSession.objects.filter(pk=call_id).first()
        if found is not None:
            _tell_the_model(found, outcome)
        return "ended"
    return "committed" if _committed_orphan(call_id, reason, by) else "left"


def _committed_orphan(session_id: str, reason: str, by: str) -> bool:
    """A committed call no worker holds is never ended on record: the request to stop is
    kept, and the worker that resumes the call finishes it or runs its compensation. False if
    the call is not live, or has not committed."""
    row = ToolSession.objects.filter(pk=session_id).first()
    if row is None or row.status not in ACTIVE_STATUSES or not row.committed:
        return False
    request = {**(row.commitment or {}), "abort_reason": reason, "abort_by": by}
    ToolSession.objects.filter(pk=session_id, status__in=ACTIVE_STATUSES).update(commitment=request)
    return True


def _tell_the_model(session: ToolSession, outcome: Outcome) -> None:
    """The chat call's tool message, written here because no worker will write it: without
    it the next turn would find the call lost and the model might start it again."""
    if session.conversation_id is None:
        return
    answered = Message.objects.filter(
        conversation_id=session.conversation_id, role="tool", tool_call_id=session.id
    ).exists()
    if not answered:
        append_message(
            str(session.conversation_id),
            uuid.uuid4().hex,
            ToolReply(tool_message(outcome), outcome).message(session.id),
        )
