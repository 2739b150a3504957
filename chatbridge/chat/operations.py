"""Operator actions on tool sessions, shared by the admin and the management command."""

from __future__ import annotations

from asgiref.sync import async_to_sync

from chatbridge.calls.outcome import OPERATOR
from chatbridge.cluster.peers import broadcast_abort
from chatbridge.records import lease
from chatbridge.records.liveness import worker_alive
from chatbridge.records.models import ACTIVE_STATUSES, ToolSession
from chatbridge.records.orphans import end_unheld

__all__ = ["OPERATOR_PREFIX", "abort_tool_session"]

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
