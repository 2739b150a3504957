"""What a task looks like on the wire (SEP-2663, 2026-07-28): the params of ``tasks/*`` and the
fields of a task as ``tasks/get`` (and ``tools/call``) show it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, assert_never

import mcp_types as types
from pydantic import Field

from chatbridge.calls.outcome import (
    Aborted,
    Cancelled,
    Completed,
    Declined,
    Denied,
    Failed,
    Outcome,
)

__all__ = ["TaskParams", "UpdateTaskParams", "dump", "ended_view", "task_times"]


class TaskParams(types.RequestParams):
    task_id: str = Field(min_length=1, max_length=200)


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dump(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(by_alias=True, mode="json", exclude_none=True))


def task_times(
    task_id: str, created: datetime, updated: datetime, ttl: float, poll_ms: int
) -> dict[str, Any]:
    """The id and times every view of a task carries."""
    return {
        "taskId": task_id,
        "createdAt": _iso(created),
        "lastUpdatedAt": _iso(updated),
        # Expiry is counted from the last update; ttlMs is from creation (spec), so it grows.
        "ttlMs": int((updated - created).total_seconds() * 1000 + ttl * 1000),
        "pollIntervalMs": poll_ms,
    }


def ended_view(outcome: Outcome, result: types.CallToolResult, details: bool) -> dict[str, Any]:
    """Ended: a result (also a tool error, or the user's refusal), or cancelled."""
    text = next((c.text for c in result.content if isinstance(c, types.TextContent)), "")
    match outcome:
        case Aborted(by="refused") | Completed() | Declined() | Cancelled() | Failed() | Denied():
            shown: dict[str, Any] = {"status": "completed"}
            if details:  # the CallToolResult as tools/call returns it on 2026-07-28
                shown["result"] = {**dump(result), "resultType": "complete"}
            return shown
        case Aborted():
            return {"status": "cancelled", "statusMessage": text}
        case _:
            assert_never(outcome)
