"""Conversation persistence for the engine, and who owns a conversation."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from chatbridge.chat.models import ACTIVE_STATUSES, Conversation, Message, ToolSession
from chatbridge.chat.recorder import WORKER_ID
from chatbridge.chat.writer import write_later, write_now
from chatbridge.core.conversation import ResumableCall
from chatbridge.core.protocol import Phase

__all__ = ["DjangoStore", "owner_key"]

TITLE_LENGTH = 60


def owner_key(user: Any, session_key: str | None) -> str | None:
    """``user:<id>`` for a logged-in user, ``session:<key>`` for a browser session."""
    if user is not None and getattr(user, "is_authenticated", False):
        return f"user:{user.pk}"
    return f"session:{session_key}" if session_key else None


def _append(conversation_id: str, message_id: str, message: dict[str, Any]) -> None:
    with transaction.atomic():
        conversation = Conversation.objects.select_for_update().get(pk=conversation_id)
        last = conversation.messages.aggregate(m=Max("seq"))["m"] or 0
        Message.objects.create(
            id=message_id,
            conversation=conversation,
            seq=last + 1,
            role=message["role"],
            content=message.get("content") or "",
            tool_calls=message.get("tool_calls"),
            tool_call_id=message.get("tool_call_id") or "",
        )
        if message["role"] == "user" and last == 0:
            text = " ".join(str(message.get("content") or "").split())
            conversation.title = text[:TITLE_LENGTH] + ("…" if len(text) > TITLE_LENGTH else "")
        conversation.save(update_fields=["title", "updated_at"])


def _messages(conversation_id: str) -> list[dict[str, Any]]:
    return [m.as_llm_message() for m in Message.objects.filter(conversation_id=conversation_id)]


# A turn passes through several phases in a few milliseconds; only the latest one needs
# writing, and queued phase writes would delay the journal writes that wait behind them.
_latest_phase: dict[str, str] = {}


def _save_latest_phase(conversation_id: str) -> None:
    phase = _latest_phase.pop(conversation_id, None)
    if phase is None:
        return
    Conversation.objects.filter(pk=conversation_id).update(phase=phase)
    ToolSession.objects.filter(conversation_id=conversation_id, ended_at=None).update(phase=phase)


def _resumable(conversation_id: str) -> list[ResumableCall]:
    return [
        ResumableCall(s.id, s.tool_name, dict(s.arguments), s.journal_entries(), s.worker)
        for s in ToolSession.objects.filter(
            conversation_id=conversation_id, status__in=ACTIVE_STATUSES
        ).order_by("created_at")
    ]


def _claim(call_id: str, worker: str) -> bool:
    taken = ToolSession.objects.filter(
        pk=call_id, worker=worker, status__in=ACTIVE_STATUSES
    ).update(worker=WORKER_ID, resumes=F("resumes") + 1, last_resumed_at=timezone.now())
    return taken == 1


class DjangoStore:
    """``ConversationStore`` on the Django ORM."""

    async def messages(self, conversation_id: str) -> list[dict[str, Any]]:
        return await sync_to_async(_messages)(conversation_id)

    async def append(self, conversation_id: str, message_id: str, message: dict[str, Any]) -> None:
        await write_now(_append, conversation_id, message_id, message)

    async def save_phase(self, conversation_id: str, phase: Phase) -> None:
        queued = conversation_id in _latest_phase
        _latest_phase[conversation_id] = phase  # for the admin; off the hot path, coalesced
        if not queued:
            write_later(_save_latest_phase, conversation_id)

    async def resumable(self, conversation_id: str) -> list[ResumableCall]:
        return await sync_to_async(_resumable)(conversation_id)

    async def claim(self, call_id: str, worker: str) -> bool:
        return await sync_to_async(_claim)(call_id, worker)
