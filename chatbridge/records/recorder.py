"""Keeps ``ToolSession`` and ``JournalRecord`` rows in step with the live sessions.

Two roles: ``DjangoRecorder.append`` is the session's ``JournalStore`` (a journal entry is
durable, and written only by the worker holding the call, or the call stops); the rest is
its ``SessionObserver`` (status, requests, refused answers: best effort, for the admin; a
call's last log lines and latest progress, for its card after a page reload:
``chatbridge.records.call_notes``).
Every write about a call is fenced by its lease (``chatbridge.records.lease``): a worker that
lost the call never overwrites what the new holder records, and a call is started here only
if no other worker holds it.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db.models import F
from django.utils import timezone

from chatbridge.calls.events import LogEvent, ProgressEvent, SessionEvent
from chatbridge.calls.journal import EntryKind, JournalEntry
from chatbridge.calls.outcome import describe
from chatbridge.calls.sessions import PluginSession
from chatbridge.calls.transports import HELD_BY_REQUEST
from chatbridge.records import lean_sql, lease
from chatbridge.records.call_notes import MAX_LOG_LINES, CallNotes, log_line, progress_note
from chatbridge.records.lease import WORKER_ID
from chatbridge.records.models import FINAL_PHASE, NO_PENDING, JournalRecord, ToolSession
from chatbridge.records.writer import Latest, write_later, write_now, write_soon

__all__ = ["MAX_LOG_LINES", "WORKER_ID", "DjangoRecorder"]

logger = logging.getLogger("chatbridge.lease")


def _pending_fields(session: PluginSession) -> dict[str, Any]:
    pending = session.pending
    if pending is None:
        return dict(NO_PENDING)
    return {
        "pending_key": pending.key,
        "pending_elicit_id": str(pending.id),
        "pending_message": pending.message,
        "pending_context": pending.context,
        "pending_schema": pending.schema.json,
        "pending_since": timezone.now(),
    }


def _started(session: PluginSession) -> None:
    fields = {
        "conversation_id": session.meta.get("conversation_id"),
        "tool_name": session.tool_name,
        "arguments": session.params.model_dump(mode="json"),
        "status": session.status,
        "transport": session.meta.get("transport", "chat"),
        "client": session.meta.get("client", ""),
        "meta": dict(session.meta),
        "ended_at": None,
        "updated_at": timezone.now(),
    }
    if not lease.begin(session.id, fields):  # resumed without a claim: its first write stops it
        logger.warning("call %s is held by another worker: not started here", session.id)


def _status_snapshot(session: PluginSession) -> dict[str, Any]:
    return {"status": session.status, "updated_at": timezone.now(), **_pending_fields(session)}


_Asked = tuple[str, int, str, str, dict[str, Any], Any]  # ``_requested``'s arguments


def _requested(
    session_id: str, seq: int, kind: str, key: str, request: dict[str, Any], at: Any
) -> None:
    if lean_sql.select(ToolSession, ("id",), **lease.held(session_id)) is not None:
        _request_row(session_id, seq, kind, key, request, at)
    # else: not this worker's call (any more)


def _request_row(
    session_id: str, seq: int, kind: str, key: str, request: dict[str, Any], at: Any
) -> None:
    """The journal's record of a request (the lease checked by the caller)."""
    fields = {
        "kind": kind,
        "key": key,
        "elicit_id": str(request.get("elicit_id") or ""),
        "request": request,
        "requested_at": at,
    }
    # One statement: the row, or, if the call's journal has one at ``seq`` (written before a
    # restart), its request replaced, unless it was answered (it keeps what it answered).
    lean_sql.insert(
        JournalRecord,
        {"session_id": session_id, "seq": seq, **fields},
        unless=("session_id", "seq"),
        else_set=tuple(fields),
        while_null="result",
    )


def _append(
    session_id: str, entry: JournalEntry, now: Any, snapshot: dict[str, Any] | None, commits: bool
) -> None:
    """Write ``entry`` in one transaction with the check that this worker holds the call: a
    ``write_now``, which the writer runs in a transaction or savepoint of its own, so the
    check and the entry stand or fall together (no savepoint of its own: two statements less
    on an answer's way to the tool).

    The fenced update of the call's row is the check (and takes the row's lock where the
    database has row locks); only when it finds nothing is the row read, to say why. An entry
    that ``commits`` the call marks its row committed in the same transaction, and the call's
    status ``snapshot`` waiting to be written (``running``, once the answer came) goes in the
    same update."""
    row: dict[str, Any] = {**(snapshot or {}), "updated_at": now}
    if commits:
        row["committed"] = entry.key
    if not lean_sql.update(ToolSession, row, **lease.held(session_id)):
        lease.check(session_id)  # raises: no such row, or another worker holds the call
    # The (session, scope, pos) constraint refuses a second writer of the same slot.
    fields = {
        "kind": entry.kind,
        "key": entry.key,
        "scope": entry.scope,
        "pos": entry.pos,
        "digest": entry.digest or "",
        "result": entry.result if entry.text is None else lean_sql.JsonText(entry.text),
        "answered_at": now,
    }
    where = {"session_id": session_id, "seq": entry.seq}
    if not lean_sql.update(JournalRecord, fields, **where):
        lean_sql.insert(JournalRecord, {**where, "requested_at": now, **fields})


def _start_step(session_id: str, entry: JournalEntry, request: dict[str, Any], now: Any) -> None:
    """A step's start on record before its side effect, in one transaction with the check
    that this worker holds the call (the fenced update of its row, as ``_append``). Written
    again for a step run again by its key: the row is there already, only the check counts."""
    if not lean_sql.update(ToolSession, {"updated_at": now}, **lease.held(session_id)):
        lease.check(session_id)  # raises: no such row, or another worker holds the call
    lean_sql.insert(
        JournalRecord,
        {
            "session_id": session_id,
            "seq": entry.seq,
            "kind": "step",
            "key": entry.key,
            "scope": entry.scope,
            "pos": entry.pos,
            "digest": entry.digest or "",
            "request": request,
            "requested_at": now,
        },
        unless=("session_id", "seq"),
    )


def _fork(session_id: str, seq: int, now: Any) -> None:
    """The call's journal forks (an earlier answer changed): its rows from ``seq`` on are
    marked abandoned by this change, in one transaction with the check that this worker holds
    the call (the fenced count of its changes)."""
    held = ToolSession.objects.filter(**lease.held(session_id))
    if not held.update(changes=F("changes") + 1, updated_at=now):
        lease.check(session_id)  # raises: no such row, or another worker holds the call
    found = lean_sql.select(ToolSession, ("changes",), id=session_id)
    assert found is not None, "the fenced update found the row"
    JournalRecord.objects.filter(session_id=session_id, seq__gte=seq, abandoned=0).update(
        abandoned=found[0]
    )


def _rejected(session_id: str, elicit_id: str, data: dict[str, Any], errors: Any, at: Any) -> None:
    record = JournalRecord.objects.filter(session_id=session_id, elicit_id=elicit_id).last()
    refused = {"at": at.isoformat(), "data": data, "errors": errors}
    if record is not None and refused not in record.rejected:  # written once, if run again
        record.rejected = [*record.rejected, refused]
        record.save(update_fields=["rejected"])


def _ended_snapshot(session: PluginSession, event: SessionEvent) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "status": session.status,
        "phase": FINAL_PHASE,  # not the conversation's phase of the moment
        "ended_at": timezone.now(),
        **_pending_fields(session),
    }
    outcome = session.outcome
    if outcome is not None:
        fields["outcome"] = outcome.model_dump(mode="json")
        fields["error"] = describe(outcome)
    if event.type == "completed":
        fields["result"] = event.result
    elif event.type == "aborted":
        fields.update(aborted_by=session.aborted_by or "", aborted_at=timezone.now())
    if event.type in ("completed", "failed", "aborted") and event.commitment is not None:
        fields.update(committed=event.commitment.key, commitment=event.commitment.to_dict())
    return fields


def _abort_deferred(session_id: str, commitment: dict[str, Any]) -> None:
    lean_sql.update(ToolSession, {"commitment": commitment}, **lease.held(session_id))


def _chat(session: PluginSession) -> bool:
    """A call of the chat: its turn goes on to a write that waits (the tool's next question,
    its result message, the turn's release), which carries what the call queued before it."""
    return session.meta.get("transport", "chat") == "chat"


class DjangoRecorder:
    """``JournalStore`` and ``SessionObserver`` on the ORM, through the ordered writer.

    Status changes, requests and refused answers are queued; each journal entry is waited
    for (the entry exists before the tool acts on the answer), and so is a question (on
    record before it is shown). A call's row joins the writer's ordered lane, and the call's
    first write that waits carries it, in the chat and for an MCP call held open by its request
    (its client reaches it only through its questions); a task's or a round's row is waited for
    (its client may ask another worker for it at once). A failed
    journal write raises to the session, which stops the call.
    """

    def __init__(self) -> None:
        # Call id → its question's journal request, until the status that shows it is written.
        self._asked: dict[str, _Asked] = {}
        # Call id → its latest status snapshot not written yet: the writes of a burst of
        # status changes (running, then the next question) are one.
        self._statuses: Latest[dict[str, Any]] = Latest()
        self._notes = CallNotes()  # call id → its log lines and progress not written yet

    # Writes, run on the writer's thread.

    def _save_status(self, session_id: str) -> bool | None:
        """Write the call's latest snapshot, fenced by its lease: whether this worker holds
        the call (the update found its row), or None if no snapshot was left to write."""
        fields = self._statuses.take(session_id)
        if fields is None:
            return None
        fields = {**fields, **self._notes.take_progress(session_id)}
        return bool(lean_sql.update(ToolSession, fields, **lease.held(session_id)))

    def _save_question(self, session_id: str, asked: _Asked | None) -> None:
        """A question on record before it is shown, in one job: the call's status with the
        question (fenced by the lease) and the question's journal request, whose lease check
        is that update (no read of its own)."""
        held = self._save_status(session_id)
        if asked is None:
            return
        if held is None:  # an earlier group wrote the snapshot: the request checks for itself
            _requested(*asked)
        elif held:
            _request_row(*asked)

    def _append(self, session_id: str, entry: JournalEntry, now: Any, commits: bool) -> None:
        _append(session_id, entry, now, self._statuses.take(session_id), commits)

    def _ended(self, session_id: str, fields: dict[str, Any]) -> None:
        self._statuses.drop(session_id)  # the end supersedes any status not written yet
        if not lease.release(session_id, {**fields, **self._notes.take_progress(session_id)}):
            logger.info("call %s ended here, but another worker holds it: not recorded", session_id)

    async def append(self, session: PluginSession, entry: JournalEntry) -> None:
        commitment = session.commitment
        commits = (
            commitment is not None
            and (entry.kind, entry.key, entry.scope) == ("elicit", commitment.key, "")
            and entry.result.get("action") == "accept"
        )
        await write_now(self._append, session.id, entry, timezone.now(), commits)

    async def start_step(
        self, session: PluginSession, entry: JournalEntry, request: dict[str, Any]
    ) -> None:
        await write_now(_start_step, session.id, entry, request, timezone.now())

    async def fork(self, session: PluginSession, seq: int) -> None:
        await write_now(_fork, session.id, seq, timezone.now())

    async def session_started(self, session: PluginSession) -> None:
        if _chat(session) or session.meta.get("transport") in HELD_BY_REQUEST:
            write_soon(_started, session)
        else:  # a task's or a round's client may ask another worker for it at once
            await write_now(_started, session)

    async def status_changed(self, session: PluginSession) -> None:
        # A snapshot now: the session moves on before a queued write runs. A question is on
        # record before it is shown (operators and other workers look for it there); the
        # other changes are written in the background, the latest of a burst once.
        queued = not self._statuses.keep(session.id, _status_snapshot(session))
        asked = self._asked.pop(session.id, None)
        if session.status == "awaiting_elicit":
            await write_now(self._save_question, session.id, asked)
            return
        if asked is not None:  # answered before it waited (its page had reported)
            write_later(_requested, *asked)
        if not queued:
            write_later(self._save_status, session.id)

    async def capability_requested(
        self, session: PluginSession, seq: int, kind: EntryKind, key: str, request: dict[str, Any]
    ) -> None:
        if kind == "step":
            return  # its start is on record already (``start_step``)
        asked = (session.id, seq, kind, key, request, timezone.now())
        if kind == "elicit":  # written with the status that shows it (``status_changed``)
            self._asked[session.id] = asked
        else:
            write_later(_requested, *asked)

    async def capability_recorded(self, session: PluginSession, entry: JournalEntry) -> None:
        return None  # ``append`` wrote it, durably, before the tool went on

    async def answer_rejected(
        self,
        session: PluginSession,
        elicit_id: str,
        data: dict[str, Any],
        errors: dict[str, list[str]],
    ) -> None:
        write_later(_rejected, session.id, elicit_id, data, errors, timezone.now())

    async def log_emitted(self, session: PluginSession, event: LogEvent) -> None:
        if self._notes.note(session.id, log=log_line(event)):
            write_later(self._notes.save, session.id)

    async def progress_emitted(self, session: PluginSession, event: ProgressEvent) -> None:
        if self._notes.note(session.id, progress=progress_note(event)):
            write_later(self._notes.save, session.id)

    async def abort_deferred(self, session: PluginSession) -> None:
        requested = session.abort_requested
        if requested is None:
            return
        reason, by = requested
        commitment = {"abort_reason": reason, "abort_by": by or ""}
        # Queued, not awaited: the one who asked (an operator's request on SQLite's one
        # database thread) may be waiting for this worker's reply.
        write_later(_abort_deferred, session.id, commitment)

    async def session_ended(self, session: PluginSession, event: SessionEvent) -> None:
        asked = self._asked.pop(session.id, None)
        if asked is not None:  # asked, then ended before it was shown
            write_later(_requested, *asked)
        # Waited for on every transport: the session tells its host of the end only once it
        # is on record (a crash after the person was told "booked" must not take it back).
        await write_now(self._ended, session.id, _ended_snapshot(session, event))
