"""How the admin shows values to operators: durations, dates, folded JSON, refused answers,
links to a conversation or a tool session.

Operators read the exact technical text (validation errors, exception messages) here; only
its presentation is for people: indented JSON folded under a one-line summary, dates in the
admin's localized format, durations in words.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timesince import timesince
from django.utils.translation import gettext, ngettext

__all__ = [
    "NOTHING",
    "ago",
    "conversation_url",
    "duration",
    "elapsed",
    "folded_json",
    "local_stamp",
    "rejected_answers",
    "session_url",
    "summary",
    "when",
]

NOTHING = "—"
SUMMARY_WIDTH = 90


def conversation_url(conversation_id: Any) -> str:
    """The admin page of a conversation."""
    return reverse("admin:chatbridge_chat_conversation_change", args=[quote(conversation_id)])


def session_url(session_id: str) -> str:
    """The admin page of a tool session."""
    # Quoted as the admin quotes keys: it reads _22, _5F and the like in a key as quoted
    # characters (about 2.4 % of call ids hold one).
    return reverse("admin:chatbridge_chat_toolsession_change", args=[quote(session_id)])


def duration(seconds: float | None) -> str:
    """``4 seconds``, ``3 minutes``, ``2 hours, 5 minutes``: a span for people."""
    if seconds is None:
        return NOTHING
    if seconds < 1:
        return gettext("under a second")
    if seconds < 60:
        whole = int(seconds)
        return ngettext("%(count)d second", "%(count)d seconds", whole) % {"count": whole}
    now = timezone.now()
    return timesince(now - timedelta(seconds=seconds), now)


def elapsed(moment: datetime | None) -> str:
    """How long ago ``moment`` was, as a span: ``12 seconds``, ``3 minutes``."""
    if moment is None:
        return NOTHING
    return duration(max(0.0, (timezone.now() - moment).total_seconds()))


def local_stamp(moment: datetime | None) -> str:
    """A date and time in the admin's localized format, in the current time zone."""
    if moment is None:
        return NOTHING
    return str(formats.date_format(timezone.localtime(moment), "DATETIME_FORMAT"))


def ago(moment: datetime) -> str:
    """``3 minutes ago``, or ``just now``."""
    if timezone.now() - moment < timedelta(minutes=1):
        return gettext("just now")
    # Translators: how long ago something happened; "time" is a span such as "3 minutes".
    return gettext("%(time)s ago") % {"time": timesince(moment)}


def when(moment: datetime | None) -> str:
    """``Nov. 23, 2026, 8:11 p.m. (3 minutes ago)``."""
    if moment is None:
        return NOTHING
    return f"{local_stamp(moment)} ({ago(moment)})"


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _pairs(mapping: dict[str, Any]) -> str:
    return ", ".join(
        f"{key}: {'…' if isinstance(value, dict | list) else _scalar(value)}"
        for key, value in mapping.items()
    )


def _called(item: Any) -> bool:
    """An OpenAI tool call: ``{"id": ..., "function": {"name": ...}}``."""
    return (
        isinstance(item, dict)
        and isinstance(item.get("function"), dict)
        and "name" in item["function"]
    )


def summary(value: Any) -> str:
    """One line saying what a JSON value holds (the folded view's label)."""
    if isinstance(value, dict):
        if "action" in value and set(value) <= {"action", "content"}:  # an elicitation answer
            content = value.get("content")
            if isinstance(content, dict) and content:
                pairs = ", ".join(f"{k} {_scalar(v)}" for k, v in content.items())
                text = f"{value['action']}: {pairs}"
            else:
                text = str(value["action"])
        elif "key" in value and "message" in value:  # an elicitation request
            first = str(value["message"]).splitlines()[:1]
            text = f"{value['key']}: {first[0] if first else ''}"
        elif not value:
            # Translators: the summary of an empty JSON object in the admin.
            text = gettext("(empty)")
        else:
            text = _pairs(value)
    elif isinstance(value, list) and value and all(_called(item) for item in value):
        text = ", ".join(f"{item['function']['name']} ({item.get('id', '?')})" for item in value)
    elif isinstance(value, list):
        # Translators: the summary of a JSON list in the admin.
        text = ngettext("%(count)d item", "%(count)d items", len(value)) % {"count": len(value)}
    else:
        text = _scalar(value)
    return text if len(text) <= SUMMARY_WIDTH else text[: SUMMARY_WIDTH - 1] + "…"


def folded_json(value: Any, *, label: str | None = None, open: bool = False) -> SafeString | str:
    """Indented, escaped JSON in a ``<details>`` whose summary says what it holds."""
    if value is None:
        return NOTHING
    text = json.dumps(value, ensure_ascii=False, indent=2)
    return format_html(
        '<details class="cb-json"{}><summary>{}</summary><pre>{}</pre></details>',
        SafeString(" open") if open else "",
        label if label is not None else summary(value),
        text,
    )


def _errors(errors: Any) -> str:
    """A refused answer's validation errors, word for word: ``field: message; …``."""
    if isinstance(errors, dict):
        return "; ".join(f"{field}: {_errors(messages)}" for field, messages in errors.items())
    if isinstance(errors, list):
        return " ".join(str(e) for e in errors)
    return str(errors)


def _refused_at(text: Any) -> str:
    try:
        return local_stamp(datetime.fromisoformat(str(text)))
    except ValueError:
        return str(text or NOTHING)


def rejected_answers(rejected: list[dict[str, Any]]) -> SafeString | str:
    """Each refused answer: when, what was sent (JSON) and the exact validation errors."""
    if not rejected:
        return NOTHING
    # Translators: before the validation errors of an answer that was refused.
    refused = gettext("refused:")
    return format_html(
        '<ol class="cb-refused">{}</ol>',
        format_html_join(
            "",
            '<li>{}: <code>{}</code><br>{} <span class="cb-error">{}</span></li>',
            (
                (
                    _refused_at(item.get("at")),
                    json.dumps(item.get("data"), ensure_ascii=False),
                    refused,
                    _errors(item.get("errors")),
                )
                for item in rejected
            ),
        ),
    )
