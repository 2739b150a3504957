"""Operator actions on tool sessions, shared by the admin and the management command."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.utils import timezone

from chatbridge.chat.models import ACTIVE_STATUSES, ToolSession
from chatbridge.chat.workers import broadcast_abort

__all__ = ["abort_tool_session"]


def abort_tool_session(
    session: ToolSession, *, operator: str, reason: str = "", wait: float = 3.0
) -> str:
    """Abort a live session wherever it runs; return what happened, in words.

    The abort goes to every worker through the channel layer; the one holding the session
    stops the tool (which sees ``SessionAborted``), the chat shows it and the model is told.
    A session no worker holds (its process died) is marked aborted in the table.
    """
    if session.status not in ACTIVE_STATUSES:
        return f"Session {session.id} is not live ({session.status})."
    by = f"operator {operator}"
    message = f"Aborted by {by}" + (f": {reason}" if reason else "")
    worker = async_to_sync(broadcast_abort)(session.id, message, by, wait)
    if worker is not None:  # its recorder writes the final state as the tool stops
        return f"Session {session.id} aborted on worker {worker}."
    now = timezone.now()
    ToolSession.objects.filter(pk=session.id).update(
        status="aborted",
        error=f"{message} (no running worker held it)",
        aborted_by=by,
        aborted_at=now,
        ended_at=now,
        pending_key="",
        pending_elicit_id="",
        pending_message="",
        pending_since=None,
    )
    return f"Session {session.id} was held by no running worker; marked aborted."
