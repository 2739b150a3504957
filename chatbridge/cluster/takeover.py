"""Calls no live worker holds, taken over here (DESIGN §11: leases expire).

A call's holder may be gone: stopped (SIGTERM parks its calls), killed (kill -9), or alive but
unable to write the call's journal (its database went away: it handed the call over). Every
worker looks for such calls when it starts and then every ``CHATBRIDGE_COMMITMENT_SWEEP``
seconds, and a call that could not be taken over yet (the database still away, its
conversation's turn still unwinding) is tried again at the next pass, until it is:

- a call that committed (a payment received), or that was handed over with a step whose result
  is not on record, is resumed by replay and finished, or compensated: a chat call through its
  conversation's recovery (the chat shows it), a task through the Tasks extension (its client
  finds it with ``tasks/get``), any other MCP call on its own (its outcome is on record, where
  its client's next request finds it);
- an MCP call carried by one request (legacy push, ``_respond``) that did not commit is ended on
  record, aborted by the server: its request died with its worker, and its client, when it
  next asks, is told to call the tool again;
- a chat call is resumed through its conversation's recovery too (it waits there on its
  question, on a live worker, until its person comes back or it expires), so that no call
  stays live on a dead worker; its person's chat resumes it at once when it connects first;
- a 2026-07-28 call or a task waits for its client's next request, which takes it over (or it
  is ended past its time, ``chatbridge.mcp.parked``).

Each is taken by compare-and-set on the holder seen (``chatbridge.records.lease``), so exactly one
worker takes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from django.db.models import Q
from django.utils import timezone

from chatbridge.calls.commitment import abort_requested
from chatbridge.calls.manager import SessionManager
from chatbridge.calls.outcome import BY_SERVER, aborted, describe
from chatbridge.calls.transports import HELD_BY_REQUEST, HOLDER_GONE, TASK
from chatbridge.engine.engine import ChatHub
from chatbridge.installed_plugins import get_registry
from chatbridge.records import lease
from chatbridge.records.lease import WORKER_ID
from chatbridge.records.liveness import live_workers
from chatbridge.records.models import ACTIVE_STATUSES, ToolSession, aborted_row
from chatbridge.records.outage import db_call
from chatbridge.records.periodic import Periodic

__all__ = ["Orphan", "Takeover", "orphans"]

logger = logging.getLogger("chatbridge.takeover")

ResumeTask = Callable[[str], Awaitable[bool]]


@dataclass(frozen=True)
class Orphan:
    """A live call on record that its holder no longer runs."""

    id: str
    conversation_id: str | None
    tool_name: str
    arguments: dict[str, Any]
    worker: str
    transport: str
    meta: dict[str, str]
    commitment: dict[str, Any] | None
    committed: bool


def orphans(handed_over: list[str]) -> list[Orphan]:
    """The live calls whose holder is gone and that no client's request takes over
    (committed ones, those carried by a request, the chat's), and the calls this worker
    handed over."""
    active = ToolSession.objects.filter(status__in=ACTIVE_STATUSES)
    urgent = Q(committed__gt="") | Q(transport__in=HELD_BY_REQUEST) | Q(conversation__isnull=False)
    gone = active.filter(urgent).exclude(worker__in=live_workers())
    here = active.filter(id__in=handed_over, worker=WORKER_ID)
    rows = (gone | here).only(
        "id",
        "conversation_id",
        "tool_name",
        "arguments",
        "worker",
        "transport",
        "meta",
        "commitment",
        "committed",
    )
    return [
        Orphan(
            r.id,
            str(r.conversation_id) if r.conversation_id else None,
            r.tool_name,
            dict(r.arguments),
            r.worker,
            r.transport,
            {str(k): str(v) for k, v in (r.meta or {}).items()},
            r.commitment,
            bool(r.committed),
        )
        for r in rows
    ]


def _claim(call_id: str, worker: str) -> list[dict[str, Any]] | None:
    """Take the call from ``worker`` (the lease's compare-and-set); its journal, or None if
    another worker took it."""
    row = lease.held_rows(call_id).first() if lease.claim(call_id, worker) else None
    return row.journal_entries() if row is not None else None


class Takeover(Periodic):
    """Takes over the calls no live worker holds (see the module docstring), every
    ``interval`` seconds (never when it is None). ``resume_task``: the Tasks extension's own
    resume of a task (it follows the task it resumes)."""

    def __init__(
        self,
        manager: SessionManager,
        hub: ChatHub,
        interval: float | None,
        resume_task: ResumeTask | None = None,
    ) -> None:
        what = "taking over calls no live worker holds"
        every = interval if interval is not None else 0.0
        super().__init__("chatbridge-takeover", self.sweep, every=every, what=what)
        self.manager, self.hub, self.interval = manager, hub, interval
        self.resume_task = resume_task
        self._followers: set[asyncio.Task[Any]] = set()

    def start(self) -> None:
        if self.interval is not None:
            super().start()

    async def sweep(self) -> list[str]:
        """Take over every call no live worker holds that cannot wait; their ids."""
        manager = self.manager
        taken: list[str] = []
        # Reads that wait out a short outage (a cut connection, a failover) like every other
        # read of the runtime; one that fails past its retries is tried at the next pass.
        for call in await db_call(orphans, manager.handed_over_ids()):
            if manager.get(call.id) is not None:
                continue  # live here (resumed meanwhile)
            if call.worker == WORKER_ID and not manager.handed_over(call.id):
                continue  # ending here: its recorder is writing the end
            try:
                if await self._take(call):
                    taken.append(call.id)
            except Exception:  # one call's failure must not keep the others waiting
                logger.exception("taking over call %s failed; trying again later", call.id)
        return taken

    async def _take(self, call: Orphan) -> bool:
        if call.conversation_id is not None:  # the chat resumes it, and shows it
            logger.info("chat call %s: resuming its conversation", call.id)
            return await self.hub.recover(call.conversation_id)
        if call.transport == TASK and self.resume_task is not None:
            logger.info("MCP task %s: resumed from worker %r", call.id, call.worker)
            return await self.resume_task(call.id)
        if not call.committed and call.transport in HELD_BY_REQUEST:
            return await self._end(call)
        plugin = get_registry().get(call.tool_name)
        if plugin is None:
            logger.error("call %s: tool %r is not served here", call.id, call.tool_name)
            return False
        journal = await db_call(_claim, call.id, call.worker)
        if journal is None or self.manager.get(call.id) is not None:
            return False  # another worker took it, or its client's request resumed it here
        logger.info("MCP call %s: resumed from worker %r", call.id, call.worker)
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

    async def _end(self, call: Orphan) -> bool:
        """An MCP call whose request died with its worker: ended on record (compare-and-set
        on the holder seen, so one worker ends it; never a committed call)."""
        outcome = aborted(HOLDER_GONE, BY_SERVER, None)
        row = aborted_row(
            by=BY_SERVER, error=describe(outcome), now=timezone.now(), outcome=outcome
        )
        if not await db_call(lease.end, call.id, call.worker, row):
            return False
        logger.info("MCP call %s: its worker %r is gone; ended on record", call.id, call.worker)
        return True
