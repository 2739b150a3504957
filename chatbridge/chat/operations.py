"""Operator actions on tool sessions, shared by the admin and the management command."""

from __future__ import annotations

import uuid
from typing import Literal

from asgiref.sync import async_to_sync
from django.utils import timezone

from chatbridge.calls.outcome import OPERATOR, Outcome, aborted, describe
from chatbridge.chat.models import ACTIVE_STATUSES, Message, ToolSession, aborted_row
from chatbridge.cluster.liveness import worker_alive
from chatbridge.cluster.peers import broadcast_abort
from chatbridge.engine.tool_message import tool_message
from chatbridge.records import lease
from chatbridge.records.store import _append

__all__ = ["OPERATOR_PREFIX", "abort_tool_session", "end_unheld"]

# ``ToolSession.aborted_by`` of an operator's abort is "operator <name>".
OPERATOR_PREFIX = OPERATOR


def abort_tool_session(
    session: ToolSession, *, operator: str, reason: str = "", wait: float = 3.0
) -> str:
    """Abort a live session wherever it runs; return what happened, in words.

    The abort goes to every worker through the channel layer; the one holding the session
    stops the tool (which sees ``SessionAborted``), the chat shows it and the model is told.
    A session no running worker holds (its process died) is marked aborted in the table,
    through its lease; one whose holder is alive but did not answer is left to it. Who aborted
    (``aborted_by``: "operator <name>") and the reason as typed (``abort_reason``) are on record.
    """
    if session.status not in ACTIVE_STATUSES:
        return f"Session {session.id} is not live ({session.status})."
    by = f"{OPERATOR_PREFIX}{operator}"
    reason = reason.strip()
    # On record before the worker ends the call: whoever renders the ended call finds it.
    ToolSession.objects.filter(pk=session.id, status__in=ACTIVE_STATUSES).update(
        abort_reason=reason
    )
    reply = async_to_sync(broadcast_abort)(session.id, reason, by, wait)
    if reply is not None:  # its recorder writes the final state as the tool stops
        worker = reply.worker
        if reply.said:
            return f"Session {session.id} on worker {worker} was not stopped: {reply.said}"
        if reply.decision == "pending":
            return f"Session {session.id}: worker {worker} took the abort; it is under way."
        if reply.decision == "ended":  # it ended first (its end was being put on record)
            return f"Session {session.id} on worker {worker} had already ended; nothing to stop."
        return f"Session {session.id} aborted on worker {worker}."
    # No worker answered. A holder that is alive keeps its call (its channel layer may be
    # away, or it is busy): only a gone holder's call is ended on record.
    holder = lease.holder(session.id)
    if holder and worker_alive(holder):
        return (
            f"Session {session.id}: worker {holder} holds it and did not answer in time; "
            "nothing was changed. Try again in a moment."
        )
    match end_unheld(session.id, holder or "", by=by, reason=reason):
        case "ended":
            return f"Session {session.id} was held by no running worker; marked aborted."
        case "committed":
            return (
                f"Session {session.id} has committed and no running worker holds it, so it was "
                "not marked aborted: the worker that resumes it finishes it, or runs its "
                "compensation, with your request to stop on record."
            )
    return f"Session {session.id} is not live."


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
        _append(
            str(session.conversation_id),
            uuid.uuid4().hex,
            {"role": "tool", "tool_call_id": session.id, "content": tool_message(outcome)},
        )
