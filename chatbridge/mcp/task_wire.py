"""What a task looks like on the wire (SEP-2663, 2026-07-28): the params of ``tasks/*`` and the
fields of a task as ``tasks/get`` (and ``tools/call``) show it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from pydantic import Field

from chatbridge.core.approval import DENIED_BY
from chatbridge.mcp.modes import REFUSED_BY

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


def ended_view(
    status: str, aborted_by: str, outcome: types.CallToolResult, details: bool
) -> dict[str, Any]:
    """Ended: a result (also a tool error, or the user's refusal), or cancelled."""
    text = next((c.text for c in outcome.content if isinstance(c, types.TextContent)), "")
    if status in ("completed", "failed") or aborted_by in (DENIED_BY, REFUSED_BY):
        shown: dict[str, Any] = {"status": "completed"}
        if details:  # the CallToolResult as tools/call returns it on 2026-07-28
            shown["result"] = {**dump(outcome), "resultType": "complete"}
        return shown
    return {"status": "cancelled", "statusMessage": text}
