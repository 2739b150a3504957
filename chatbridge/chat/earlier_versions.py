"""Earlier versions of a conversation on the page: what a fork left (a message edited and sent
again, a reply regenerated: ``chatbridge.records.forks``), kept readable, folded away.

On page load the transcript's abandoned items are grouped per fork (``group_forks``); live, a
``conversation_forked`` event becomes a marker that the page's script folds the same way
(``fork_marker``, read by ``message-actions.js``).
"""

from __future__ import annotations

from typing import Any

from django.template.loader import render_to_string

from chatbridge.engine.protocol import ConversationForked

__all__ = ["fork_marker", "group_forks"]


def group_forks(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript's ``items`` with each run of one fork's items (their ``fork``: the
    number of the fork that left them, 0 for none) in an "earlier" item."""
    grouped: list[dict[str, Any]] = []
    for item in items:
        fork = item.get("fork", 0)
        if not fork:
            grouped.append(item)
        elif grouped and grouped[-1]["kind"] == "earlier" and grouped[-1]["fork"] == fork:
            grouped[-1]["items"].append(item)
        else:
            grouped.append({"kind": "earlier", "fork": fork, "items": [item]})
    return grouped


def fork_marker(event: ConversationForked) -> str:
    """The marker the page folds the abandoned items of ``event`` behind."""
    ids = [f"msg-{m}" for m in event.messages] + [f"tool-{c}" for c in event.calls]
    return render_to_string("chatbridge/fork_marker.html", {"ids": " ".join(ids)})
