"""Approval as part of the call (DESIGN §9): a tool declared with ``.needs_approval()`` asks
the user before its body runs, on every transport, as a built-in question of the call.

The question has the reserved key ``__approval__`` and the model ``Approval``; its answer is
journaled like any other, so a resumed or retried call does not ask twice. The chat shows it
as its approve/deny prompt; MCP clients get it as an elicitation (or a ``_respond`` request):
accept with ``approve: true`` lets the tool run; decline, cancel or ``approve: false`` deny it.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from chatbridge.author.elicit import ElicitResult

__all__ = ["APPROVAL_KEY", "DENIED_BY", "Approval", "approval_message", "denial_reason"]

APPROVAL_KEY = "__approval__"
DENIED_BY = "approval"  # ``PluginSession.aborted_by`` of a call the user denied


class Approval(BaseModel):
    """The answer to "may this tool run?"."""

    approve: bool = Field(True, title="Approve", description="true lets the tool run")
    reason: str = Field("", max_length=500, title="Reason", description="Why (optional)")


def approval_message(tool_name: str, arguments: dict[str, Any]) -> str:
    shown = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return (
        f"Allow the tool {tool_name!r} to run with {shown}? "
        "Accept to approve; decline (or answer approve: false) to deny."
    )


def denial_reason(result: ElicitResult[Any]) -> str | None:
    """``None`` when ``result`` approves; else the reason given ("" for none)."""
    if result.accepted and isinstance(result.content, Approval) and result.content.approve:
        return None
    if result.accepted and isinstance(result.content, Approval):
        return result.content.reason.strip()
    return ""
