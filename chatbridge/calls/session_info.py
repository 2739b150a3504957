"""What a live call is doing, as a value: its status, and a snapshot of it for inspection (the
admin's live sessions, ``SessionManager.list_active``). ``PluginSession.info`` makes one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

__all__ = ["SessionInfo", "SessionStatus"]

SessionStatus = Literal[
    "running", "awaiting_elicit", "awaiting_sample", "completed", "failed", "aborted"
]


@dataclass(frozen=True)
class SessionInfo:
    """A snapshot of a live session, for inspection (admin, ``list_active``)."""

    id: str
    tool_name: str
    call_id: str
    status: SessionStatus
    pending_key: str | None
    pending_message: str | None
    pending_elicit_id: str | None
    created_at: datetime
    updated_at: datetime
    idle_seconds: float
