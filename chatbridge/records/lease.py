"""A call's lease: which worker holds it (``ToolSession.worker``), and the only writer of that.

- ``begin``: a new call is held by the worker that starts it; a row another worker holds is
  never taken this way (a stale copy started without a claim writes nothing).
- ``claim``: a call whose holder is gone is taken over by compare-and-set on the holder seen,
  so exactly one claimant wins; chat recovery, the commitment sweeper, 2026-07-28 retries and
  Tasks all claim here before they resume a call by replay.
- ``held``: the fence. Every write about a call (its journal, a step's check, its status,
  its notes) matches only while this worker holds it; a worker that lost the call finds
  nothing to write, and a journal write says so (``ClaimLost``).
- ``release``: the call ends with its outcome, written by its holder only; ``end`` does the
  same for a suspended call whose holder is gone (compare-and-set, never a committed call).

Nothing else writes the owner column: ``tests/test_lease.py`` reads the source to check it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from django.db.models import F, QuerySet
from django.utils import timezone

from chatbridge.author.exceptions import ClaimLost
from chatbridge.records import lean_sql
from chatbridge.records.models import ACTIVE_STATUSES, ToolSession
from chatbridge.records.outage import db_call

__all__ = [
    "WORKER_ID",
    "CallLease",
    "begin",
    "check",
    "claim",
    "end",
    "held",
    "held_rows",
    "holder",
    "release",
]

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"

_OWNER = "worker"  # the column; named here only
_ENDED = ("completed", "failed", "aborted")


def held(call_id: str) -> dict[str, Any]:
    """The fence: the ``where`` of a write made only while this worker holds the call."""
    return {"id": call_id, _OWNER: WORKER_ID}


def held_rows(call_id: str) -> QuerySet[ToolSession]:
    """The call's row while this worker holds it (empty once another worker does)."""
    return ToolSession.objects.filter(**held(call_id))


def holder(call_id: str) -> str | None:
    """The worker holding the call ("" for none yet); None if there is no such call."""
    found = lean_sql.select(ToolSession, (_OWNER,), id=call_id)
    return str(found[0]) if found is not None else None


def check(call_id: str) -> None:
    """Raise ``ClaimLost`` unless this worker holds the call (``LookupError``: no such call)."""
    found = holder(call_id)
    if found is None:
        raise LookupError(f"no tool session row {call_id!r} to record the journal in")
    if found != WORKER_ID:
        raise ClaimLost(call_id, WORKER_ID, found)


def begin(call_id: str, fields: Mapping[str, Any]) -> bool:
    """The call starts here: its row written with ``fields`` and held by this worker. A row
    this worker holds (claimed, to resume it) is updated; an ended row of the same id is
    reused (the model may repeat a call id). False, and nothing written, if another worker
    holds the call: only a claim takes a call from its holder."""
    row = {**fields, _OWNER: WORKER_ID}
    if lean_sql.insert(ToolSession, {"id": call_id, **row}, unless=("id",)):
        return True  # a new call: one statement
    found = lean_sql.select(ToolSession, ("status", _OWNER), id=call_id)
    if found is None:  # deleted since (retention): not this worker's to start
        return False
    status, owner = found
    if owner == WORKER_ID:  # claimed here, to be resumed (fenced: unless taken meanwhile)
        return bool(lean_sql.update(ToolSession, row, **held(call_id)))
    if status in ACTIVE_STATUSES:
        return False
    return bool(lean_sql.update(ToolSession, row, id=call_id, status=status, **{_OWNER: owner}))


def claim(call_id: str, seen_holder: str) -> bool:
    """Take the active call from ``seen_holder`` (compare-and-set: one claimant wins). The
    caller has found ``seen_holder`` gone; a resume is counted."""
    taken = ToolSession.objects.filter(
        pk=call_id, status__in=ACTIVE_STATUSES, **{_OWNER: seen_holder}
    ).update(**{_OWNER: WORKER_ID}, resumes=F("resumes") + 1, last_resumed_at=timezone.now())
    return taken == 1


def _outcome(outcome: Mapping[str, Any]) -> dict[str, Any]:
    status = outcome.get("status")
    if status not in _ENDED:
        raise ValueError(f"a call ends with status {' or '.join(_ENDED)}, not {status!r}")
    return dict(outcome)


def release(call_id: str, outcome: Mapping[str, Any]) -> bool:
    """The call ended here: its ``outcome`` (an ended ``status`` and the fields that say how)
    written if this worker still holds it. The holder's name stays on the ended row."""
    return bool(lean_sql.update(ToolSession, _outcome(outcome), **held(call_id)))


def end(call_id: str, seen_holder: str, outcome: Mapping[str, Any]) -> bool:
    """End a suspended call whose holder, ``seen_holder``, is gone, with ``outcome``: claimed
    and released in one compare-and-set, so exactly one worker ends it. A committed call is
    never ended this way (it is resumed and finished, or compensated, instead)."""
    return bool(
        ToolSession.objects.filter(
            pk=call_id, status__in=ACTIVE_STATUSES, committed="", **{_OWNER: seen_holder}
        ).update(**{_OWNER: WORKER_ID}, **_outcome(outcome))
    )


class CallLease:
    """The lease for code on the event loop: MCP rounds and Tasks, the chat's store."""

    worker = WORKER_ID  # this process

    async def holder(self, call_id: str) -> str | None:
        return await db_call(holder, call_id)

    async def claim(self, call_id: str, seen_holder: str) -> bool:
        return await db_call(claim, call_id, seen_holder)

    async def end(self, call_id: str, seen_holder: str, outcome: Mapping[str, Any]) -> bool:
        return await db_call(end, call_id, seen_holder, outcome)
