"""Django admin for tool sessions: each call with its journal, outcome, commitment and open
question (read-only; aborting live ones is ``admin_live``'s)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from chatbridge.calls.commitment import CommitmentNote
from chatbridge.chat.admin_display import (
    NOTHING,
    conversation_url,
    duration,
    elapsed,
    folded_json,
    rejected_answers,
    when,
)
from chatbridge.chat.admin_live import LiveSessionsAdmin
from chatbridge.chat.admin_readonly import ReadOnlyInline
from chatbridge.records.models import JournalRecord, ToolSession

__all__ = ["ToolSessionAdmin"]


class JournalInline(ReadOnlyInline):
    model = JournalRecord
    verbose_name = _("journal entry (question, sample or step)")
    verbose_name_plural = _("journal: questions, samples and steps, in order")
    fields = ("seq", "kind", "key", "branch", "asked", "answer", "refused", "latency")
    readonly_fields = fields

    @admin.display(description=_("branch"))
    def branch(self, record: JournalRecord) -> str:
        if not record.abandoned:
            # Translators: a journal entry the call replays (not left by a changed answer).
            return gettext("live")
        return gettext("abandoned by change %(number)d (an earlier answer was changed)") % {
            "number": record.abandoned
        }

    @admin.display(description=_("request"))
    def asked(self, record: JournalRecord) -> SafeString | str:
        request = record.request or {}
        if record.kind == "sample":
            sampled = request.get("messages") or [{}]
            label = str(sampled[-1].get("content", "")).split("\n", 1)[0][:90]
            return folded_json(request, label=label)
        if record.kind == "step":
            return folded_json(request.get("args", request))
        return folded_json(request)

    @admin.display(description=_("answer"))
    def answer(self, record: JournalRecord) -> SafeString | str:
        if record.result is None:
            # Translators: a question, sample or step not answered yet.
            return gettext("(waiting)")
        return folded_json(record.result)

    @admin.display(description=_("refused answers"))
    def refused(self, record: JournalRecord) -> SafeString | str:
        return rejected_answers(record.rejected)

    @admin.display(description=_("latency"))
    def latency(self, record: JournalRecord) -> str:
        return duration(record.latency_seconds)


class StartedFilter(admin.DateFieldListFilter):
    """Django's date filter on ``created_at``, titled for people."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.title = _("started")


# Sections of a session's page; those with nothing to say are left out (get_fieldsets).
ABORT_SECTION = _("Abort")
COMMITMENT_SECTION = _("Commitment")
PENDING_SECTION = _("Pending question")
LOG_SECTION = _("Log and progress")


@admin.register(ToolSession)
class ToolSessionAdmin(LiveSessionsAdmin):
    """Every tool call, chat or MCP: its record, and (from ``LiveSessionsAdmin``) the abort."""

    list_display = (
        "id",
        "tool_name",
        "status_badge",
        "conversation_link",
        "owner",
        "pending_question",
        "waiting",
        "age",
        "worker",
    )
    list_select_related = ("conversation",)
    list_filter = ("status", "tool_name", "transport", ("created_at", StartedFilter))
    search_fields = (
        "id",
        "tool_name",
        "pending_message",
        "conversation__title",
        "conversation__owner",
        "client",
    )
    inlines = (JournalInline,)
    change_form_template = "admin/chatbridge_chat/toolsession/change_form.html"
    change_list_template = "admin/chatbridge_chat/toolsession/change_list.html"
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "tool_name",
                    "status_badge",
                    "phase",
                    "conversation_link",
                    "owner",
                    "transport",
                    "client",
                    "worker",
                )
            },
        ),
        (_("Arguments and outcome"), {"fields": ("arguments_json", "result_json", "error_text")}),
        (ABORT_SECTION, {"fields": ("aborted_by", "abort_reason", "aborted")}),
        (COMMITMENT_SECTION, {"fields": ("committed", "commitment_text", "commitment_json")}),
        (
            PENDING_SECTION,
            {
                "fields": (
                    "pending_key",
                    "pending_message",
                    "waiting_since",
                    "pending_context_json",
                    "pending_schema_json",
                )
            },
        ),
        (
            _("Times"),
            {"fields": ("started", "updated", "ended", "resumes", "last_resumed", "changes")},
        ),
        (LOG_SECTION, {"fields": ("logs_json", "progress_json")}),
        (_("Origin"), {"fields": ("meta_json",)}),
    )
    readonly_fields = tuple(
        name for _title, options in fieldsets for name in cast(tuple[str, ...], options["fields"])
    )

    def get_fieldsets(self, request: HttpRequest, obj: ToolSession | None = None) -> Any:
        """Leave out the abort and pending-question sections when they have nothing to say."""
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None:
            return fieldsets
        empty = set()
        if not (obj.aborted_by or obj.aborted_at):
            empty.add(ABORT_SECTION)
        if not obj.pending_key:
            empty.add(PENDING_SECTION)
        if not obj.committed:
            empty.add(COMMITMENT_SECTION)
        if not (obj.logs or obj.progress):
            empty.add(LOG_SECTION)
        return [(name, options) for name, options in fieldsets if name not in empty]

    # -- columns and fields ----------------------------------------------------------------

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, session: ToolSession) -> SafeString:
        # A class per status (admin.css): the site's policy allows no inline style.
        return format_html('<span class="cb-badge cb-{}">{}</span>', session.status, session.status)

    @admin.display(description=_("conversation"), ordering="conversation__title")
    def conversation_link(self, session: ToolSession) -> SafeString | str:
        if session.conversation is None:
            return NOTHING
        return format_html(
            '<a href="{}">{}</a>',
            conversation_url(session.conversation_id),
            session.conversation.title,
        )

    @admin.display(description=_("owner"), ordering="conversation__owner")
    def owner(self, session: ToolSession) -> str:
        if session.conversation is not None:
            return session.conversation.owner
        meta = session.meta or {}
        if meta.get("user"):  # an MCP call made with a user's token
            return gettext("%(user)s (MCP token “%(token)s”)") % {
                "user": meta["user"],
                "token": meta.get("token", ""),
            }
        return (
            gettext("MCP client %(client)s") % {"client": session.client}
            if session.client
            else NOTHING
        )

    @admin.display(description=_("pending question"))
    def pending_question(self, session: ToolSession) -> str:
        if not session.pending_key:
            return NOTHING
        first = (session.pending_message.splitlines() or [""])[0]
        return f"{session.pending_key}: {first[:80]}"

    @admin.display(description=_("waiting for"), ordering="pending_since")
    def waiting(self, session: ToolSession) -> str:
        return elapsed(session.pending_since)

    @admin.display(description=_("age"), ordering="-created_at")
    def age(self, session: ToolSession) -> str:
        return elapsed(session.created_at)

    @admin.display(description=_("arguments"))
    def arguments_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.arguments, open=True)

    @admin.display(description=_("result"))
    def result_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.result, open=True)

    @admin.display(description=_("error (exact text)"))
    def error_text(self, session: ToolSession) -> SafeString | str:
        if not session.error:
            return NOTHING
        return format_html('<pre class="cb-error">{}</pre>', session.error)

    @admin.display(description=_("aborted"))
    def aborted(self, session: ToolSession) -> str:
        return when(session.aborted_at)

    @admin.display(description=_("waiting since"))
    def waiting_since(self, session: ToolSession) -> str:
        return when(session.pending_since)

    @admin.display(description=_("question context"))
    def pending_context_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.pending_context)

    @admin.display(description=_("answer schema"))
    def pending_schema_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.pending_schema)

    @admin.display(description=_("started"))
    def started(self, session: ToolSession) -> str:
        return when(session.created_at)

    @admin.display(description=_("last change"))
    def updated(self, session: ToolSession) -> str:
        return when(session.updated_at)

    @admin.display(description=_("ended"))
    def ended(self, session: ToolSession) -> str:
        return when(session.ended_at)

    @admin.display(description=_("last resumed"))
    def last_resumed(self, session: ToolSession) -> str:
        return when(session.last_resumed_at)

    @admin.display(description=_("meta"))
    def meta_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.meta or None)

    @admin.display(description=_("what became of it"))
    def commitment_text(self, session: ToolSession) -> str:
        note = session.commitment or {}
        # Translators: what became of a committed tool call that has ended.
        finished = gettext("finished")
        if "outcome" in note:
            return CommitmentNote.from_dict(note).text() or finished
        if "abort_reason" in note:
            # Translators: a committed call an operator aborted; "reason" is the operator's.
            return gettext("asked to stop (%(reason)s); it finishes or compensates") % {
                "reason": note["abort_reason"]
            }
        # Translators: a committed tool call still running.
        return gettext("committed; running") if session.active else finished

    @admin.display(description=_("record"))
    def commitment_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.commitment or None)

    @admin.display(description=_("log lines (the last 50)"))
    def logs_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.logs or None)

    @admin.display(description=_("latest progress"))
    def progress_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.progress or None)
