"""Keeps ``ToolSession`` and ``JournalRecord`` rows in step with the live sessions."""

from __future__ import annotations

import os
import socket
from typing import Any

from django.utils import timezone

from chatbridge.chat.models import JournalRecord, ToolSession
from chatbridge.chat.writer import write_later, write_now
from chatbridge.core.events import SessionEvent
from chatbridge.core.journal import EntryKind, JournalEntry
from chatbridge.core.sessions import PluginSession

__all__ = ["WORKER_ID", "DjangoRecorder"]

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


def _pending_fields(session: PluginSession) -> dict[str, Any]:
    pending = session.pending
    if pending is None:
        return {
            "pending_key": "",
            "pending_elicit_id": "",
            "pending_message": "",
            "pending_context": None,
            "pending_schema": None,
            "pending_since": None,
        }
    return {
        "pending_key": pending.key,
        "pending_elicit_id": str(pending.id),
        "pending_message": pending.message,
        "pending_context": pending.context,
        "pending_schema": pending.schema.json,
        "pending_since": timezone.now(),
    }


def _started(session: PluginSession) -> None:
    ToolSession.objects.update_or_create(
        id=session.id,
        defaults={
            "conversation_id": session.meta.get("conversation_id"),
            "tool_name": session.tool_name,
            "arguments": session.params.model_dump(mode="json"),
            "status": session.status,
            "worker": WORKER_ID,
            "transport": session.meta.get("transport", "chat"),
            "client": session.meta.get("client", ""),
            "ended_at": None,
        },
    )


def _status_snapshot(session: PluginSession) -> dict[str, Any]:
    return {"status": session.status, "updated_at": timezone.now(), **_pending_fields(session)}


def _status_fields(session_id: str, fields: dict[str, Any]) -> None:
    ToolSession.objects.filter(pk=session_id).update(**fields)


def _requested(
    session_id: str, seq: int, kind: str, key: str, request: dict[str, Any], at: Any
) -> None:
    JournalRecord.objects.update_or_create(
        session_id=session_id,
        seq=seq,
        defaults={
            "kind": kind,
            "key": key,
            "elicit_id": str(request.get("elicit_id") or ""),
            "request": request,
            "requested_at": at,
        },
    )


def _recorded(session_id: str, entry: JournalEntry, now: Any) -> None:
    updated = JournalRecord.objects.filter(session_id=session_id, seq=entry.seq).update(
        result=entry.result, answered_at=now
    )
    if not updated:  # not announced (cannot happen for live calls; keep the journal whole)
        JournalRecord.objects.create(
            session_id=session_id,
            seq=entry.seq,
            kind=entry.kind,
            key=entry.key,
            result=entry.result,
            requested_at=now,
            answered_at=now,
        )


def _rejected(session_id: str, elicit_id: str, data: dict[str, Any], errors: Any, at: Any) -> None:
    record = JournalRecord.objects.filter(session_id=session_id, elicit_id=elicit_id).last()
    if record is not None:
        record.rejected = [
            *record.rejected,
            {"at": at.isoformat(), "data": data, "errors": errors},
        ]
        record.save(update_fields=["rejected"])


def _ended_snapshot(session: PluginSession, event: SessionEvent) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "status": session.status,
        "ended_at": timezone.now(),
        **_pending_fields(session),
    }
    if event.type == "completed":
        fields["result"] = event.result
    elif event.type == "failed":
        fields["error"] = event.error
    elif event.type == "aborted":
        fields.update(
            error=event.reason, aborted_by=session.aborted_by or "", aborted_at=timezone.now()
        )
    return fields


def _ended_fields(session_id: str, fields: dict[str, Any]) -> None:
    ToolSession.objects.filter(pk=session_id).update(**fields)


class DjangoRecorder:
    """``SessionObserver`` writing to the ORM through the process's ordered background writer.

    Status changes, requests and refused answers are queued; the session row and each journal
    entry are waited for (the entry exists before the tool acts on the answer).
    """

    async def session_started(self, session: PluginSession) -> None:
        await write_now(_started, session)

    async def status_changed(self, session: PluginSession) -> None:
        # A snapshot now: the session moves on before a queued write runs. A question is on
        # record before it is shown (operators and other workers look for it there).
        fields = _status_snapshot(session)
        if session.status == "awaiting_elicit":
            await write_now(_status_fields, session.id, fields)
        else:
            write_later(_status_fields, session.id, fields)

    async def capability_requested(
        self, session: PluginSession, seq: int, kind: EntryKind, key: str, request: dict[str, Any]
    ) -> None:
        write_later(_requested, session.id, seq, kind, key, request, timezone.now())

    async def capability_recorded(self, session: PluginSession, entry: JournalEntry) -> None:
        await write_now(_recorded, session.id, entry, timezone.now())

    async def answer_rejected(
        self,
        session: PluginSession,
        elicit_id: str,
        data: dict[str, Any],
        errors: dict[str, list[str]],
    ) -> None:
        write_later(_rejected, session.id, elicit_id, data, errors, timezone.now())

    async def session_ended(self, session: PluginSession, event: SessionEvent) -> None:
        await write_now(_ended_fields, session.id, _ended_snapshot(session, event))
