"""MCP calls parked past their time: a 2026-07-28 call or a task suspended on record by a
worker that has gone (stopped, restarted, killed), whose client has not continued it within the
state's time to live (``CHATBRIDGE_MCP_STATE_TTL``). The expiry timer of such a call
(``mcp/expiry.py``) lived in the process that is gone, so nothing else ends it: it would show
as live, held by a dead worker, until its client came back, and a client whose state has
expired never does.

Each runtime sweeps them when it starts and then every ``every`` seconds. Each is ended on
record as a live one would have been (aborted by the server, with the reason its transport
gives), by one compare-and-set on the holder seen (``lease.end``), so exactly one worker ends
it, and never a committed call (a payment received: it is resumed and finished instead). A
client that comes back first resumes its call (its retry claims the lease), and the sweep then
finds nothing to end.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta

from django.utils import timezone

from chatbridge.calls.outcome import BY_SERVER, aborted, describe
from chatbridge.mcp import rounds, task_serving
from chatbridge.records.lease import CallLease
from chatbridge.records.liveness import worker_alive
from chatbridge.records.models import ACTIVE_STATUSES, ToolSession, aborted_row
from chatbridge.records.outage import db_call
from chatbridge.records.periodic import Periodic

__all__ = ["EVERY", "REASONS", "ParkedCalls", "overdue"]

logger = logging.getLogger("chatbridge.mcp")

EVERY = 60.0  # seconds between sweeps of a runtime
# The transports whose calls outlive their requests, and why such a call ends when it expires.
REASONS: Mapping[str, str] = {
    rounds.TRANSPORT: rounds.EXPIRED,
    task_serving.TRANSPORT: task_serving.EXPIRED,
}


def overdue(before: datetime) -> list[tuple[str, str, str]]:
    """Live calls of ``REASONS``' transports last touched before ``before``, not committed,
    whose holder is gone: (call id, holder, transport)."""
    rows = ToolSession.objects.filter(
        status__in=ACTIVE_STATUSES,
        committed="",
        transport__in=list(REASONS),
        updated_at__lt=before,
    ).values_list("id", "worker", "transport")
    return [(call_id, holder, how) for call_id, holder, how in rows if not worker_alive(holder)]


class ParkedCalls(Periodic):
    """The runtime's sweep of parked MCP calls past ``ttl`` (see the module docstring)."""

    def __init__(self, ttl: float, every: float = EVERY) -> None:
        what = "ending parked MCP calls past their time"
        super().__init__("chatbridge-parked-calls", self.sweep, every=every, what=what)
        self.ttl = ttl
        self.lease = CallLease()

    async def sweep(self) -> list[str]:
        """End the parked calls past their time; the ids this worker ended."""
        before = timezone.now() - timedelta(seconds=self.ttl)
        ended = []
        for call_id, holder, transport in await db_call(overdue, before):
            outcome = aborted(REASONS[transport], BY_SERVER, None)
            error, now = describe(outcome), timezone.now()
            row = aborted_row(by=BY_SERVER, error=error, now=now, outcome=outcome)
            if await self.lease.end(call_id, holder, row):  # False: another worker was first
                logger.info("MCP call %s, parked by %s, expired: ended on record", call_id, holder)
                ended.append(call_id)
        return ended
