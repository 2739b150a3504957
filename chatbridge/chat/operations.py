"""Operator actions on tool sessions, shared by the admin and the management command."""

from __future__ import annotations

import uuid

from asgiref.sync import async_to_sync
from django.utils import timezone

from chatbridge.calls.outcome import OPERATOR, Aborted, describe
from chatbridge.chat.models import ACTIVE_STATUSES, Message, ToolSession, aborted_row
from chatbridge.chat.workers import broadcast_abort
from chatbridge.engine.tool_message import tool_message
from chatbridge.records.store import _append

__all__ = ["OPERATOR_PREFIX", "abort_tool_session"]

# ``ToolSession.aborted_by`` of an operator's abort is "operator <name>".
OPERATOR_PREFIX = OPERATOR


def abort_tool_session(
    session: ToolSession, *, operator: str, reason: str = "", wait: float = 3.0
) -> str:
    """Abort a live session wherever it runs; return what happened, in words.

    The abort goes to every worker through the channel layer; the one holding the session
    stops the tool (which sees ``SessionAborted``), the chat shows it and the model is told.
    A session no worker holds (its process died) is marked aborted in the table. Who aborted
    (``aborted_by``: "operator <name>") and the reason as typed (``abort_reason``) are on record.
    """
    if session.status not in ACTIVE_STATUSES:
        return f"Session {session.id} is not live ({session.status})."
    by = f"{OPERATOR_PREFIX}{operator}"
    reason = reason.strip()
    outcome = Aborted(by="operator", who=operator, reason=reason)
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
        return f"Session {session.id} aborted on worker {worker}."
    # No worker holds it. A call that has not committed is ended on record; the update is
    # conditional, so a page committing it (a payment, marked in the same transaction as its
    # link) and this abort cannot both win.
    ended = ToolSession.objects.filter(
        pk=session.id, status__in=ACTIVE_STATUSES, committed=""
    ).update(
        abort_reason=reason,
        **aborted_row(
            by=by,
            error=f"{describe(outcome)} (no running worker held it)",
            now=timezone.now(),
            outcome=outcome,
        ),
    )
    if ended:
        _tell_the_model(session, outcome)
        return f"Session {session.id} was held by no running worker; marked aborted."
    return _committed_orphan(session.id, reason, by)


def _committed_orphan(session_id: str, reason: str, by: str) -> str:
    """A committed call no worker holds is never ended on record: the request to stop is
    kept, and the worker that resumes the call finishes it or runs its compensation."""
    row = ToolSession.objects.filter(pk=session_id).first()
    if row is None or row.status not in ACTIVE_STATUSES:
        return f"Session {session_id} is not live."
    request = {**(row.commitment or {}), "abort_reason": reason, "abort_by": by}
    ToolSession.objects.filter(pk=session_id, status__in=ACTIVE_STATUSES).update(commitment=request)
    return (
        f"Session {session_id} has committed ({row.committed}) and no running worker holds "
        "it, so it was not marked aborted: the worker that resumes it finishes it, or runs its "
        "compensation, with your request to stop on record."
    )


def _tell_the_model(session: ToolSession, outcome: Aborted) -> None:
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
