"""HTML for the browser: elicitation cards, tool cards, transcript items and event fragments.

Every fragment is an htmx out-of-band swap; all text from the model, tools and users goes
through Django's autoescaping templates.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, assert_never

from django.template.loader import render_to_string, select_template
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, gettext_noop

from chatbridge.author.elicit import ElicitRequest
from chatbridge.author.human import field_label, human_value, refused_answers_text
from chatbridge.calls.commitment import CommitmentNote
from chatbridge.calls.outcome import (
    OUTCOME,
    Aborted,
    Cancelled,
    Completed,
    Declined,
    Denied,
    Failed,
    Outcome,
    call_status,
    describe,
)
from chatbridge.chat.chat_errors import chat_error_text
from chatbridge.chat.earlier_versions import fork_marker, group_forks
from chatbridge.chat.markdown_stream import MarkdownStream
from chatbridge.chat.streaming import oob, reply_piece
from chatbridge.engine.protocol import (
    AssistantDelta,
    AssistantMessage,
    ChatEvent,
    ConversationForked,
    ConversationState,
    ElicitComplete,
    ElicitForm,
    ErrorEvent,
    LogLine,
    MessageQueued,
    ProgressNote,
    SessionError,
    ToolCallEvent,
    UserMessage,
)

if TYPE_CHECKING:
    from chatbridge.records.models import ToolSession

__all__ = ["SocketView", "ToolCallView", "render_event", "render_form", "transcript"]

logger = logging.getLogger("chatbridge.chat")


@dataclass
class ToolCallView:
    """A tool call as the page shows it."""

    id: str
    name: str
    arguments: dict[str, Any]
    status: str = "running"
    result: Any = None
    error: str | None = None
    progress: ProgressNote | None = None
    logs: list[LogLine] = field(default_factory=list)
    commitment: str = ""  # what became of a committed call (a payment), in words
    ended: Outcome | None = None  # how it ended (None while it runs)

    @property
    def arguments_text(self) -> str:
        return "; ".join(
            f"{field_label(k)}: {human_value(v)}"
            for k, v in self.arguments.items()
            if v is not None and v != ""
        )

    @property
    def outcome(self) -> str:
        """What happened, as the badge tells it (not only the session's status): a call whose
        question was declined or cancelled, or whose result says, in the field its tool
        declared (``.done_when``), that it did not do its job."""
        match self.ended:
            case None:
                return self.status
            case Completed(done=True):
                return "completed"
            case Completed():
                return "incomplete"
            case Declined():
                return "declined"
            case Cancelled():
                return "cancelled"
            case Denied():
                return "denied"
            case Failed():
                return "failed"
            case Aborted(by="user"):
                return "stopped-by-you"
            case Aborted(by="operator"):
                return "stopped-by-operator"
            case Aborted():
                return "aborted"
            case _:
                assert_never(self.ended)

    @property
    def badge(self) -> str:
        words = BADGES.get(self.outcome)
        return gettext(words) if words is not None else self.outcome.capitalize()

    @property
    def operator_reason(self) -> str:
        """The reason an operator gave for stopping the call ("" if none)."""
        return self.ended.reason if isinstance(self.ended, Aborted) else ""

    @property
    def denial_reason(self) -> str:
        """The reason the user gave when they denied the call ("" if none)."""
        return self.ended.reason if isinstance(self.ended, Denied) else ""

    @property
    def refused_text(self) -> str:
        """How often the answer to its question was refused before the question closed, and
        why, in words ("" unless that is how the call failed)."""
        ended = self.ended
        if not isinstance(ended, Failed) or ended.refused is None:
            return ""
        return refused_answers_text(ended.refused.count, ended.refused.why)


BADGES = {
    "running": gettext_noop("Running"),
    "completed": gettext_noop("Done"),
    "declined": gettext_noop("Declined"),
    "cancelled": gettext_noop("Cancelled"),
    "incomplete": gettext_noop("Not done"),
    "stopped-by-you": gettext_noop("Stopped by you"),
    "stopped-by-operator": gettext_noop("Stopped by an operator"),
    "aborted": gettext_noop("Stopped"),
    "denied": gettext_noop("Denied"),
    "failed": gettext_noop("Failed"),
}


def render_form(
    request: ElicitRequest,
    template_name: str,
    context: dict[str, Any],
    errors: dict[str, list[str]],
    *,
    session_id: str,
) -> str:
    """The elicitation card around a plugin's form template."""
    body = render_to_string(template_name, {**context, "errors": errors, "request": request})
    return render_to_string(
        "chatbridge/elicit_card.html",
        {
            "request": request,
            "session_id": session_id,
            "headline": request.message.split("\n\n", 1)[0],
            "body": mark_safe(body),  # noqa: S308 - rendered by an autoescaping template
            "form_errors": errors.get("__all__", []),
            "refused": bool(errors),  # focus goes to the error, else to the question
        },
    )


def render_result(call: ToolCallView) -> SafeString:
    template = select_template([f"{call.name}/result.html", "chatbridge/tool_result.html"])
    context = {"call": call, "result": call.result, "result_is_text": isinstance(call.result, str)}
    html: str = template.render(context)
    return mark_safe(html)  # noqa: S308 - rendered by an autoescaping template


def tool_card(call: ToolCallView) -> str:
    return render_to_string(
        "chatbridge/tool_card.html", {"call": call, "result_html": render_result(call)}
    )


def _recorded_outcome(row: ToolSession) -> Outcome | None:
    """How the call of a session row ended (None while it runs)."""
    if row.active or row.outcome is None:
        return None
    return OUTCOME.validate_python(row.outcome)


def _recorded_commitment(row: ToolSession) -> str:
    """What became of a committed call, in words, from its session row."""
    note = row.commitment if not row.active else None
    if not note or "outcome" not in note:
        return ""
    return CommitmentNote.from_dict(note).text()


def _recorded_notes(row: ToolSession) -> tuple[list[LogLine], ProgressNote | None]:
    """The log lines and latest progress a call's card showed, from its session row."""
    logs = [LogLine(call_id=row.id, **line) for line in row.logs or ()]
    progress = ProgressNote(call_id=row.id, **row.progress) if row.progress else None
    return logs, progress


def _unrecorded_outcome(answer: Mapping[str, Any]) -> Outcome | None:
    """How a call without a session row ended (it never became one: an unknown tool, invalid
    arguments, a lost session; or retention removed it): the outcome kept beside its tool
    message (``ToolReply``), never read from the message's text. None: not on record."""
    kept = answer.get("outcome")
    return OUTCOME.validate_python(kept) if kept is not None else None


def transcript(
    messages: list[dict[str, Any]],
    message_ids: list[str],
    sessions: Mapping[str, ToolSession],
    forks: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Items to render on page load: messages and tool cards, and the earlier versions the
    conversation's forks left (``forks``: each message's fork number, 0 for none), grouped.

    A tool card's status, result and error come from its call's session row (``sessions``,
    by call id); only a call without one falls back to the outcome kept with its tool message
    (a tool message's ``"outcome"``, beside what the model reads).
    """
    results = {m.get("tool_call_id"): m for m in messages if m.get("role") == "tool"}
    items: list[dict[str, Any]] = []
    for index, (message, message_id) in enumerate(zip(messages, message_ids, strict=True)):
        role, fork = message.get("role"), forks[index] if forks else 0
        if role in ("user", "assistant") and message.get("content"):
            items.append(
                {
                    "kind": "message",
                    "role": role,
                    "id": message_id,
                    "content": message["content"],
                    "fork": fork,
                }
            )
        for raw in message.get("tool_calls") or ():
            fn = raw.get("function") or {}
            try:
                arguments = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            call = ToolCallView(
                str(raw.get("id")),
                str(fn.get("name")),
                arguments if isinstance(arguments, dict) else {},
            )
            row, answer = sessions.get(call.id), results.get(call.id)
            if row is not None:
                call.ended = _recorded_outcome(row)
                call.status = call_status(call.ended) if call.ended is not None else "running"
                call.result = row.result if call.ended is not None else None
                call.error = row.error or None
                call.logs, call.progress = _recorded_notes(row)
                call.commitment = _recorded_commitment(row)
            elif answer is not None and (ended := _unrecorded_outcome(answer)) is not None:
                call.ended, call.status = ended, call_status(ended)
                call.result = (
                    ended.result if isinstance(ended, Completed | Declined | Cancelled) else None
                )
                call.error = describe(ended) or None
            card = mark_safe(tool_card(call))  # noqa: S308
            items.append({"kind": "tool", "html": card, "fork": fork})
    return group_forks(items)


@dataclass
class SocketView:
    """What one socket's page already shows: message and tool ids, the approvals listed, the
    reply being written."""

    seen: set[str] = field(default_factory=set)
    approvals: tuple[str, ...] = ()
    streams: dict[str, MarkdownStream] = field(default_factory=dict)


def render_event(event: ChatEvent, view: SocketView) -> str | None:
    """The out-of-band fragment for ``event`` on a page in the state ``view``."""
    seen = view.seen
    if isinstance(event, UserMessage):
        seen.add(event.message_id)
        item = render_to_string(
            "chatbridge/message.html",
            {
                "role": "user",
                "id": event.message_id,
                "content": event.content,
                "client_id": event.client_id,
            },
        )
        # A new message clears the errors of earlier attempts.
        return oob("beforeend", "#transcript", item) + oob("innerHTML", "#errors", "")
    if isinstance(event, MessageQueued):
        item = render_to_string(
            "chatbridge/queued_message.html",
            {"id": event.message_id, "content": event.content, "client_id": event.client_id},
        )
        return oob("beforeend", "#queued", item) + oob("innerHTML", "#errors", "")
    if isinstance(event, AssistantDelta):  # Markdown as it is written (chat/streaming.py)
        has_bubble = event.message_id in seen
        seen.add(event.message_id)
        return reply_piece(event, view.streams, shown=has_bubble) or None
    if isinstance(event, AssistantMessage):
        context = {
            "role": "assistant",
            "id": event.message_id,
            "content": event.content,
            "stopped": event.stopped,
        }
        view.streams.pop(event.message_id, None)
        if event.message_id in seen:  # replace the streamed bubble with the final text
            return render_to_string("chatbridge/message.html", {**context, "oob": True})
        seen.add(event.message_id)
        return oob("beforeend", "#transcript", render_to_string("chatbridge/message.html", context))
    if isinstance(event, ToolCallEvent):
        call = ToolCallView(
            event.call_id, event.tool_name, event.arguments, event.status, event.result, event.error
        )
        call.ended, call.commitment = event.outcome, event.commitment
        if event.status in ("running", "denied") and event.call_id not in seen:
            seen.add(event.call_id)
            return oob("beforeend", "#transcript", tool_card(call))
        return render_to_string(
            "chatbridge/tool_update.html", {"call": call, "result_html": render_result(call)}
        )
    if isinstance(event, LogLine):
        return oob(
            "beforeend",
            f"#tool-{event.call_id}-log",
            render_to_string("chatbridge/log_line.html", {"log": event}),
        )
    if isinstance(event, ProgressNote):
        return render_to_string(
            "chatbridge/progress.html", {"call_id": event.call_id, "note": event, "oob": True}
        )
    if isinstance(event, ElicitForm):
        return event.html  # the card's root replaces the slot #elicit-<call_id>
    if isinstance(event, ElicitComplete):
        return render_to_string("chatbridge/elicit_done.html", {"event": event})
    if isinstance(event, SessionError):
        return oob(
            "beforeend", "#transcript", render_to_string("chatbridge/notice.html", {"event": event})
        )
    if isinstance(event, ConversationState):
        html = render_to_string("chatbridge/status.html", {"state": event, "oob": True})
        shown = tuple(a.call_id for a in event.approvals)
        if shown != view.approvals:  # redraw only on change: a half-typed reason survives
            view.approvals = shown
            html += render_to_string(
                "chatbridge/approvals.html", {"approvals": event.approvals, "oob": True}
            )
        return html
    if isinstance(event, ConversationForked):
        return fork_marker(event)
    if isinstance(event, ErrorEvent):
        words = chat_error_text(event.code, event.message)
        if words != event.message:  # the exact text is for logs; the person reads ``words``
            logger.info("error %s shown in words for people: %s", event.code, event.message)
        return oob(
            "innerHTML",
            "#errors",
            render_to_string("chatbridge/error.html", {"event": event, "text": words}),
        )
    return None
