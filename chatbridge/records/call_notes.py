"""A call's last log lines and latest progress, kept on its row for its card after a page
reload (``DjangoRecorder`` queues them): a burst of lines and progress is one write, and a
line is kept only up to ``MAX_LOG_TEXT`` characters, the last ``MAX_LOG_LINES`` of them."""

from __future__ import annotations

import json
import threading
from typing import Any

from chatbridge.calls.events import LogEvent, ProgressEvent
from chatbridge.records import lean_sql, lease
from chatbridge.records.models import ToolSession
from chatbridge.records.writer import undo_on_retry

__all__ = [
    "MAX_LOG_LINES",
    "MAX_LOG_TEXT",
    "log_line",
    "note",
    "progress_note",
    "save_notes",
    "take_progress",
]

MAX_LOG_LINES = 50  # a call keeps its last 50 log lines
MAX_LOG_TEXT = 2000  # characters of a log line's message kept

# A call's log lines and progress since its last write, per call id: a burst of lines is one
# write. The event loop adds and the writer thread takes: every access holds the lock.
_notes: dict[str, dict[str, Any]] = {}
_notes_lock = threading.Lock()


def note(call_id: str, *, log: dict[str, Any] | None = None, progress: Any = None) -> bool:
    """Keep a log line or the latest progress; True if a write must be queued (none is)."""
    with _notes_lock:
        queued = call_id in _notes
        notes = _notes.setdefault(call_id, {"logs": [], "progress": None})
        if log is not None:
            notes["logs"] = [*notes["logs"], log][-MAX_LOG_LINES:]
        if progress is not None:
            notes["progress"] = progress
    return not queued


def save_notes(call_id: str) -> None:
    with _notes_lock:
        notes = _notes.pop(call_id, None)
    if notes is None:
        return
    undo_on_retry(lambda: _notes_back(call_id, notes))
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


def take_progress(call_id: str) -> dict[str, Any]:
    """On the writer's thread, for a fenced update of the call's row about to be made: the
    call's progress waiting to be written, as fields to add to that update, when progress is
    all that waits (its queued ``save_notes`` then finds nothing: a statement less). Log
    lines stay for ``save_notes``, which reads the lines kept before adding to them."""
    with _notes_lock:
        notes = _notes.get(call_id)
        if notes is None or notes["logs"] or notes["progress"] is None:
            return {}
        del _notes[call_id]
    undo_on_retry(lambda: _notes_back(call_id, notes))
    return {"progress": notes["progress"]}


def _notes_back(call_id: str, notes: dict[str, Any]) -> None:
    """The notes a write took, back before those that came since (it runs again: the
    database went away). Should its commit have happened after all, those lines show twice
    in the call's card: they are not worth a statement more on every write."""
    with _notes_lock:
        newer = _notes.get(call_id)
        if newer is None:
            _notes[call_id] = notes
        else:
            newer["logs"] = [*notes["logs"], *newer["logs"]][-MAX_LOG_LINES:]
            newer["progress"] = newer["progress"] or notes["progress"]


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
