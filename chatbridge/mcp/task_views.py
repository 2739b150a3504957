"""What an MCP Task looks like (``tasks/get``, the task a call creates), what an update for a
question it no longer asks is told, and the ``Host`` that follows its session
(``chatbridge.calls.drive``); ``chatbridge.mcp.tasks`` serves them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS

from chatbridge.author.elicit import ElicitId, ElicitRequest
from chatbridge.author.exits import Change
from chatbridge.calls.commitment import abort_decision_text
from chatbridge.calls.drive import EndEvent, Pause
from chatbridge.calls.events import LogEvent, ProgressEvent
from chatbridge.calls.outcome import OUTCOME, Aborted
from chatbridge.calls.sessions import PluginSession
from chatbridge.mcp.exits_wire import change_of
from chatbridge.mcp.hosts import errors_text
from chatbridge.mcp.modes import REFUSED_BY, ModeNotDeclared, modes_in
from chatbridge.mcp.results import recorded_result, terminal_result
from chatbridge.mcp.task_cluster import TaskRecord
from chatbridge.mcp.task_wire import dump, ended_view, task_times

__all__ = ["TaskHost", "answer_key", "live_task", "recorded_task", "refuse_abandoned"]

Shape = Callable[[ElicitRequest, str, str], types.InputRequiredResult]


def answer_key(session: PluginSession) -> str:
    """The open question's key: its id, and a new key after each refused answer (a key is
    never reused once answered: spec)."""
    question = session.question
    assert question is not None
    attempts = question.attempts
    return f"{question.id}#{attempts + 1}" if attempts else question.id


async def live_task(
    session: PluginSession,
    created: datetime,
    ttl: float,
    poll_ms: int,
    shape: Shape,
    details: bool = True,
) -> dict[str, Any]:
    """The task of a session held here: working, waiting for input (its question shaped as
    a round would carry it, by ``shape``), or ended."""
    task = task_times(session.id, created, session.updated_at, ttl, poll_ms)
    if session.finished:
        event = await session.wait_finished()  # at once: it has ended
        ended = session.outcome or Aborted(by="server", reason="ended")  # None: parked
        task.update(ended_view(ended, terminal_result(session, event), details))
        return task
    question = session.question
    if question is None or question.shown is None:  # not on record yet
        commitment, requested = session.commitment, session.abort_requested
        if commitment is not None and requested is not None:  # cancelled after it committed
            said = abort_decision_text(session.abort_decision(), commitment.what)
            return {**task, "status": "working", "statusMessage": said}
        return {**task, "status": "working"}
    pending = question.request
    task["status"] = "input_required"
    task["statusMessage"] = pending.message.splitlines()[0] if pending.message else ""
    if details:
        note = errors_text(question.error) if question.error else ""
        shaped = shape(pending, "", note)
        [request] = (shaped.input_requests or {}).values()
        task["inputRequests"] = {answer_key(session): dump(request)}
    return task


def refuse_abandoned(session: PluginSession, responses: Mapping[str, Any]) -> None:
    """``MCPError`` (invalid params) if ``responses`` answer a question of this task that was
    left when an earlier answer was changed (a client acting on what it saw before the change,
    or an answer that crossed it), saying that it is no longer open and what the task waits
    for now. Other keys that are not open (a refused answer's, an answered question's, another
    call's) are left alone, and so is the same change sent again (a retry: it is that change).
    """
    question = session.question
    live = {elicit_id for elicit_id, _ in session.asked()}
    for key, raw in responses.items():
        elicit_id = key.partition("#")[0]
        try:
            asked = ElicitId.parse(elicit_id)
        except ValueError:
            continue
        if (asked.tool_name, asked.call_id) != (session.tool_name, session.call_id):
            continue
        changed = session.changed_from(elicit_id)
        if changed is not None:  # the question the latest change left
            action = raw.get("action") if isinstance(raw, Mapping) else None
            meta = raw.get("_meta") if isinstance(raw, Mapping) else None
            if action == "cancel" and change_of(meta) in (changed.elicit_id, changed.key):
                continue
        elif question is None or elicit_id == question.id or elicit_id in live:
            continue
        elif asked.seq > ElicitId.parse(question.id).seq:
            continue  # not asked yet: nobody was shown it
        raise _no_longer_open(session, key, changed)


def _no_longer_open(session: PluginSession, key: str, changed: Change | None) -> MCPError:
    why = f" ({changed.label})" if changed is not None else ""
    question = session.question
    if question is None or question.shown is None:
        now = "The task is working on the change; tasks/get shows what it asks next."
    else:
        pending = question.request
        head = pending.message.splitlines()[0] if pending.message else pending.key
        now = f"The task now waits for {answer_key(session)} ({head}); tasks/get shows it."
    return MCPError(
        INVALID_PARAMS,
        f"The question {key} is no longer open: it was left when an earlier answer was "
        f"changed{why}. {now}",
    )


def recorded_task(task_id: str, record: TaskRecord, ttl: float, poll_ms: int) -> dict[str, Any]:
    """The task of a call that ended on record."""
    call = record.call
    ended_at = record.ended_at or record.updated_at
    task = task_times(task_id, record.created_at, ended_at, ttl, poll_ms)
    assert call.outcome is not None, "a task ended on record has its outcome"
    task.update(ended_view(OUTCOME.validate_python(call.outcome), recorded_result(call), True))
    return task


class TaskHost:
    """An MCP Task as a ``Host``: tasks carry no logs or progress; a question is shown by
    ``tasks/get`` once it is on record (or, in a mode the creating request did not declare,
    ends the task with the error every MCP path gives); each event wakes whoever waits for
    the task to change (``changed``)."""

    def __init__(self, session: PluginSession, changed: Callable[[PluginSession], None]) -> None:
        self.session, self.changed = session, changed

    async def question(self, request: ElicitRequest) -> Pause[None] | None:
        session = self.session
        modes = modes_in(session.meta)
        question = session.question
        if request.mode in modes:
            if question is not None and question.id == str(request.id):
                question.shown = request  # on record: tasks/get shows it
        else:  # never shown
            refusal = ModeNotDeclared(request.tool_name, request.mode, modes)
            await session.abort(str(refusal), by=REFUSED_BY)
        self.changed(session)
        return None

    async def log(self, event: LogEvent) -> None:
        self.changed(self.session)

    async def progress(self, event: ProgressEvent) -> None:
        self.changed(self.session)

    async def ended(self, event: EndEvent) -> None:
        self.changed(self.session)
