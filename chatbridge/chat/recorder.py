"""Keeps ``ToolSession`` and ``JournalRecord`` rows in step with the live sessions."""

from __future__ import annotations

import os
import socket
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone

from chatbridge.chat.models import JournalRecord, ToolSession
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


@sync_to_async
def _started(session: PluginSession) -> None:
    ToolSession.objects.update_or_create(
        id=session.id,
        defaults={
            "conversation_id": session.meta.get("conversation_id"),
            "tool_name": session.tool_name,
            "arguments": session.params.model_dump(mode="json"),
            "status": session.status,
            "worker": WORKER_ID,
            "ended_at": None,
        },
    )


@sync_to_async
def _status(session: PluginSession) -> None:
    ToolSession.objects.filter(pk=session.id).update(
        status=session.status, updated_at=timezone.now(), **_pending_fields(session)
    )


@sync_to_async
def _requested(session_id: str, seq: int, kind: str, key: str, request: dict[str, Any]) -> None:
    JournalRecord.objects.update_or_create(
        session_id=session_id,
        seq=seq,
        defaults={
            "kind": kind,
            "key": key,
            "elicit_id": str(request.get("elicit_id") or ""),
            "request": request,
            "requested_at": timezone.now(),
        },
    )


@sync_to_async
def _recorded(session_id: str, entry: JournalEntry) -> None:
    now = timezone.now()
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


@sync_to_async
def _rejected(session_id: str, elicit_id: str, data: dict[str, Any], errors: Any) -> None:
    record = JournalRecord.objects.filter(session_id=session_id, elicit_id=elicit_id).last()
    if record is not None:
        record.rejected = [
            *record.rejected,
            {"at": timezone.now().isoformat(), "data": data, "errors": errors},
        ]
        record.save(update_fields=["rejected"])


@sync_to_async
def _ended(session: PluginSession, event: SessionEvent) -> None:
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
    ToolSession.objects.filter(pk=session.id).update(**fields)


class DjangoRecorder:
    """``SessionObserver`` writing to the ORM, awaited in order by each session."""

    async def session_started(self, session: PluginSession) -> None:
        await _started(session)

    async def status_changed(self, session: PluginSession) -> None:
        await _status(session)

    async def capability_requested(
        self, session: PluginSession, seq: int, kind: EntryKind, key: str, request: dict[str, Any]
    ) -> None:
        await _requested(session.id, seq, kind, key, request)

    async def capability_recorded(self, session: PluginSession, entry: JournalEntry) -> None:
        await _recorded(session.id, entry)

    async def answer_rejected(
        self,
        session: PluginSession,
        elicit_id: str,
        data: dict[str, Any],
        errors: dict[str, list[str]],
    ) -> None:
        await _rejected(session.id, elicit_id, data, errors)

    async def session_ended(self, session: PluginSession, event: SessionEvent) -> None:
        await _ended(session, event)
