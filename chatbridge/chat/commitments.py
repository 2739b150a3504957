"""Committed calls that no live worker holds are finished by this one.

A call that committed (``.commits()``: a payment received) must end by finishing or by its
compensation, never by being dropped. Its worker may have been stopped (SIGTERM parks it),
killed (kill -9), or have handed it over (its database went away): the row stays active and
committed. Every worker looks for such rows at start and then every
``CHATBRIDGE_COMMITMENT_SWEEP`` seconds, claims one whose worker's heartbeat has stopped
(compare-and-set, so one worker takes it), and resumes it by replay with any request to stop
that was on record: a chat call through its conversation's recovery (the conversation gets its
tool message, the chat shows it), an MCP call on its own (its client finds the outcome through
``tasks/get`` or its next round; a legacy client's request is gone, the outcome is on record).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async

from chatbridge.calls.commitment import abort_requested
from chatbridge.calls.manager import SessionManager
from chatbridge.chat.models import ACTIVE_STATUSES, ToolSession
from chatbridge.chat.registry import get_registry
from chatbridge.engine.engine import ChatHub
from chatbridge.records import lease
from chatbridge.records.lease import WORKER_ID
from chatbridge.records.outage import db_call
from chatbridge.records.periodic import Periodic
from chatbridge.records.store import worker_alive

__all__ = ["CommitmentSweeper"]

logger = logging.getLogger("chatbridge.commitments")


@dataclass(frozen=True)
class _Committed:
    id: str
    conversation_id: str | None
    tool_name: str
    arguments: dict[str, Any]
    worker: str
    meta: dict[str, str]
    commitment: dict[str, Any] | None


def _committed() -> list[_Committed]:
    rows = ToolSession.objects.filter(status__in=ACTIVE_STATUSES).exclude(committed="")
    return [
        _Committed(
            r.id,
            str(r.conversation_id) if r.conversation_id else None,
            r.tool_name,
            dict(r.arguments),
            r.worker,
            {str(k): str(v) for k, v in (r.meta or {}).items()},
            r.commitment,
        )
        for r in rows.only(
            "id", "conversation_id", "tool_name", "arguments", "worker", "meta", "commitment"
        )
    ]


def _claim(call_id: str, worker: str) -> list[dict[str, Any]] | None:
    """Take the call from ``worker`` (the lease's compare-and-set); its journal, or None if
    another worker took it."""
    row = lease.held_rows(call_id).first() if lease.claim(call_id, worker) else None
    return row.journal_entries() if row is not None else None


class CommitmentSweeper(Periodic):
    """Finds committed calls no live worker holds and finishes them here (every ``interval``
    seconds; never when it is None)."""

    def __init__(self, manager: SessionManager, hub: ChatHub, interval: float | None) -> None:
        what = "looking for committed calls"
        every = interval if interval is not None else 0.0
        super().__init__("chatbridge-commitments", self.sweep, every=every, what=what)
        self.manager, self.hub = manager, hub
        self.interval = interval
        self._followers: set[asyncio.Task[Any]] = set()

    def start(self) -> None:
        if self.interval is not None:
            super().start()

    async def sweep(self) -> list[str]:
        """Resume every committed call no live worker holds; their ids."""
        resumed: list[str] = []
        manager = self.manager
        # Reads that wait out a short outage (a cut connection, a failover) like every other
        # read of the runtime, instead of failing the sweep with a traceback in the log.
        for call in await db_call(_committed):
            if manager.get(call.id) is not None:
                continue
            mine = call.worker == WORKER_ID
            if mine and not manager.handed_over(call.id):
                continue  # ending here: its recorder is writing the end
            if not mine and await db_call(worker_alive, call.worker):
                continue
            if await self._resume(call):
                resumed.append(call.id)
        return resumed

    async def _resume(self, call: _Committed) -> bool:
        if call.conversation_id is not None:  # the chat resumes it, and shows it
            logger.info("committed chat call %s: resuming its conversation", call.id)
            return await self.hub.recover(call.conversation_id)
        plugin = get_registry().get(call.tool_name)
        if plugin is None:
            logger.error("committed call %s: tool %r is not served here", call.id, call.tool_name)
            return False
        journal = await sync_to_async(_claim)(call.id, call.worker)
        if journal is None:
            return False
        logger.info("committed MCP call %s: resumed from worker %r", call.id, call.worker)
        session = await self.manager.create(
            plugin.tool,
            call.arguments,
            call_id=call.id,
            journal=journal,
            meta=call.meta,
            abort_requested=abort_requested(call.commitment),
        )
        # Nobody reads its events here: its end is recorded by the recorder, its client
        # finds it on record. A question it asks after the commitment waits as any other.
        follower = asyncio.create_task(session.wait_finished())
        self._followers.add(follower)
        follower.add_done_callback(self._followers.discard)
        return True
