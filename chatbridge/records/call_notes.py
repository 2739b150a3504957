"""A call's last log lines and latest progress, kept on its row for its card after a page
reload (``DjangoRecorder`` queues them): a burst of lines and progress is one write, and a
line is kept only up to ``MAX_LOG_TEXT`` characters, the last ``MAX_LOG_LINES`` of them."""

from __future__ import annotations

import json
from typing import Any

from chatbridge.calls.events import LogEvent, ProgressEvent
from chatbridge.records import lean_sql, lease
from chatbridge.records.models import ToolSession
from chatbridge.records.writer import Latest

__all__ = ["MAX_LOG_LINES", "MAX_LOG_TEXT", "CallNotes", "log_line", "progress_note"]

MAX_LOG_LINES = 50  # a call keeps its last 50 log lines
MAX_LOG_TEXT = 2000  # characters of a log line's message kept

Notes = dict[str, Any]  # {"logs": [line, ...], "progress": note or None}


def _both(taken: Notes, newer: Notes) -> Notes:
    """The notes a write took, back before those that came since (it runs again: the
    database went away). Should its commit have happened after all, those lines show twice
    in the call's card: they are not worth a statement more on every write."""
    return {
        "logs": [*taken["logs"], *newer["logs"]][-MAX_LOG_LINES:],
        "progress": newer["progress"] or taken["progress"],
    }


class CallNotes:
    """Each call's log lines and progress since its last write: a burst of lines is one
    write. Owned by the recorder that queues the writes."""

    def __init__(self) -> None:
        self._waiting: Latest[Notes] = Latest(_both)

    def note(
        self, call_id: str, *, log: dict[str, Any] | None = None, progress: Any = None
    ) -> bool:
        """Keep a log line or the latest progress; True if a write must be queued (none is)."""

        def noted(notes: Notes | None) -> Notes:
            logs = notes["logs"] if notes is not None else []
            kept = notes["progress"] if notes is not None else None
            return {
                "logs": [*logs, log][-MAX_LOG_LINES:] if log is not None else logs,
                "progress": progress if progress is not None else kept,
            }

        return self._waiting.update(call_id, noted)

    def save(self, call_id: str) -> None:
        """On the writer's thread: the call's notes on its row, fenced by its lease."""
        notes = self._waiting.take(call_id)
        if notes is None:
            return
        fields: dict[str, Any] = {}
        if notes["progress"] is not None:
            fields["progress"] = notes["progress"]
        if notes["logs"]:  # the kept lines are read, then extended: the row locked till commit
            row = lean_sql.select(ToolSession, ("logs",), for_update=True, **lease.held(call_id))
            if row is None:
                return
            fields["logs"] = [*(row[0] or []), *notes["logs"]][-MAX_LOG_LINES:]
        if fields:  # progress alone: one fenced update, nothing read
            lean_sql.update(ToolSession, fields, **lease.held(call_id))

    def take_progress(self, call_id: str) -> dict[str, Any]:
        """On the writer's thread, for a fenced update of the call's row about to be made:
        the call's progress waiting to be written, as fields to add to that update, when
        progress is all that waits (its queued ``save`` then finds nothing: a statement
        less). Log lines stay for ``save``, which reads the lines kept before adding to them."""
        notes = self._waiting.take(
            call_id, only=lambda n: not n["logs"] and n["progress"] is not None
        )
        return {"progress": notes["progress"]} if notes is not None else {}


def log_line(event: LogEvent) -> dict[str, Any]:
    """A log line as the call's row keeps it: its message cut to ``MAX_LOG_TEXT``, its data as
    JSON (what is not JSON becomes its text)."""
    return {
        "level": event.level,
        "message": event.message[:MAX_LOG_TEXT],
        "data": json.loads(json.dumps(event.data, default=str)),
    }


def progress_note(event: ProgressEvent) -> dict[str, Any]:
    """The latest progress as the call's row keeps it."""
    return {"message": event.message, "progress": event.progress, "total": event.total}
