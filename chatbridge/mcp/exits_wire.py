"""A question's exits over MCP (``chatbridge.author.exits``): what an elicitation offers besides
an answer, in its ``_meta``, and a client's answer that goes back to an earlier question.

- The request's ``_meta["io.chatbridge/exits"]``: ``{"change": [{"question", "key", "label"}],
  "decline": {"label", "hint"} | null, "cancel": ... }`` — the earlier answers the client may
  change now, and the author's words for Decline and Cancel (``null``: not offered to people;
  the tool still takes that action). Sent on ``elicitation/create`` (form and URL), in a
  task's input requests and in a 2026-07-28 round's; the official Python SDK's client drops
  ``_meta`` from a round's ``inputRequests`` entries (a task's reach the client whole).
- A client that wants to change an earlier answer answers the open question with
  ``{"action": "cancel", "_meta": {"io.chatbridge/change": "<question id or key>"}}``. The
  server goes back to that question and asks it again (a new elicitation, or the next round's
  ``inputRequests``); a refused change is asked again with the reason. A server that does not
  know this extension takes the answer for what its action says: Cancel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chatbridge.author.elicit import Cancel, ElicitRequest
from chatbridge.author.exits import offered

__all__ = ["CHANGE_META", "EXITS_META", "ChangeTo", "change_of", "exits_meta"]

EXITS_META = "io.chatbridge/exits"
CHANGE_META = "io.chatbridge/change"
_MAX_TARGET = 300  # an elicitation id is at most this long (the records' column)


@dataclass(frozen=True)
class ChangeTo(Cancel):
    """A client's answer asking to change the earlier answer ``target`` (a question's id or
    key): a ``Cancel`` to whatever does not know it."""

    target: str = ""


def exits_meta(request: ElicitRequest) -> dict[str, Any]:
    """``_meta["io.chatbridge/exits"]`` of ``request``."""
    return offered(request.exits, request.changes)


def change_of(meta: Mapping[str, Any] | None) -> str:
    """The earlier question a client's answer asks to change ("" for none)."""
    target = (meta or {}).get(CHANGE_META)
    if isinstance(target, str) and 0 < len(target) <= _MAX_TARGET:
        return target
    return ""
