"""What a task needs from outside its process: its row in the shared database, and the other
workers. The chat layer implements it (``chatbridge.mcp.endpoint``); the runtime injects it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from chatbridge.mcp.results import StoredCall

__all__ = ["TaskCluster", "TaskRecord"]


@dataclass(frozen=True)
class TaskRecord:
    """A task's call as the database keeps it, and who holds it; ``meta``: the session meta
    it was started with (its origin and declared elicitation modes); ``pending``: the id of
    its open question, ``refused``: how many answers to it were refused."""

    call: StoredCall
    worker: str
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    meta: Mapping[str, str] = field(default_factory=dict)
    pending: str = ""
    refused: int = 0


class TaskCluster(Protocol):
    """The other workers and the shared database (the chat layer's, injected by the runtime)."""

    worker: str  # this process

    async def find(self, call_id: str) -> TaskRecord | None: ...

    async def holder_elsewhere(self, call_id: str) -> str | None:
        """The other live worker holding the live task (its lease and that worker's heartbeat,
        read together); None if it has ended, is held here, or its holder is gone."""
        ...

    async def alive(self, worker: str) -> bool: ...

    async def claim(self, call_id: str, worker: str) -> bool:
        """Take the call over from ``worker`` (gone): True for exactly one claimant."""
        ...

    async def route(self, worker: str, message: dict[str, Any]) -> dict[str, Any] | None:
        """Have ``worker`` serve ``message`` (``Tasks.serve_routed``); None if unreachable."""
        ...

    async def end(self, call_id: str, worker: str, reason: str, by: str) -> bool:
        """Record the suspended call as aborted (``reason``, ``by``) if ``worker`` (gone)
        still holds it: True for exactly one caller."""
        ...
