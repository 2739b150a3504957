"""A conversation forks: a message edited and sent again, or the last reply regenerated.

The messages from the fork point on are marked ``abandoned`` by the conversation's n-th fork:
kept (the page shows them as an earlier version), never read by the model again. Like a tool
call's journal (``chatbridge.calls.session_changes``), a fork never goes back past what cannot
be undone: a tool call that committed (a payment) after the fork point refuses it.
"""

from __future__ import annotations

from django.db.models import Max

from chatbridge.author.exceptions import CommandRefused
from chatbridge.author.language import gettext as _
from chatbridge.records.models import Message, ToolSession

__all__ = ["Fork", "fork_messages"]

Fork = tuple[list[str], list[str]]  # the abandoned messages' ids, their tool calls' ids


def fork_messages(conversation_id: str, message_id: str, edit: bool) -> Fork:
    """Abandon the conversation's messages from ``message_id`` on (a user's message being
    edited, or — ``edit`` false — the last reply, to regenerate), by the conversation's next
    fork number. Returns the abandoned messages' ids and their tool calls' ids;
    ``CommandRefused`` says why it cannot."""
    live = Message.objects.filter(conversation_id=conversation_id, abandoned=0)
    start = live.filter(id=message_id).values_list("seq", "role", "tool_calls").first()
    if start is None:
        raise CommandRefused("NOT_FOUND", _("That message is not in this conversation."))
    seq, role, tool_calls = start
    after = list(live.filter(seq__gte=seq).order_by("seq").values_list("id", "tool_calls"))
    if edit and role != "user":
        raise CommandRefused("BAD_COMMAND", _("Only your own messages can be edited."))
    if not edit and (role != "assistant" or tool_calls or len(after) != 1):
        raise CommandRefused("BAD_COMMAND", _("Only the last reply can be regenerated."))
    calls = [str(c.get("id")) for _id, made in after for c in made or ()]
    committed = list(
        ToolSession.objects.filter(conversation_id=conversation_id, id__in=calls)
        .exclude(committed="")
        .values_list("tool_name", flat=True)
    )
    if committed:
        raise CommandRefused(
            "CHANGE_REFUSED",
            _(
                "This message cannot be edited: %(tool)s committed after it (a payment was "
                "made), and is not undone. Send a new message instead."
            )
            % {"tool": committed[0].replace("_", " ")},
        )
    forks = Message.objects.filter(conversation_id=conversation_id).aggregate(n=Max("abandoned"))
    number = (forks["n"] or 0) + 1
    abandoned = [i for i, _made in after]
    Message.objects.filter(id__in=abandoned).update(abandoned=number)
    return abandoned, calls
