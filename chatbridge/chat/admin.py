"""Django admin: conversations, tool sessions with their journal, live sessions, abort.

Everything here is read-only (it is the record of what happened); the one thing an operator
does is abort live sessions, always through a confirmation page that asks for a reason.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, cast

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from chatbridge.chat import mcp_token_admin  # noqa: F401  (registers the MCP tokens' admin)
from chatbridge.chat.admin_display import (
    NOTHING,
    ago,
    duration,
    elapsed,
    folded_json,
    local_stamp,
    rejected_answers,
    when,
)
from chatbridge.chat.models import (
    Conversation,
    ElicitLink,
    JournalRecord,
    Message,
    QueueEntry,
    ToolSession,
)
from chatbridge.chat.operations import DEFAULT_ABORT_REASON, abort_tool_session
from chatbridge.chat.workers import query_workers
from chatbridge.core.commitment import CommitmentNote

ABORT_TEMPLATE = "admin/chatbridge_chat/toolsession/abort_confirm.html"
ADMIN_CSS = {"all": ("chatbridge/admin.css",)}


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _conversation_url(conversation_id: Any) -> str:
    return reverse("admin:chatbridge_chat_conversation_change", args=[quote(conversation_id)])


def _session_url(session_id: str) -> str:
    # Quoted as the admin quotes keys: it reads _22, _5F and the like in a key as quoted
    # characters (about 2.4 % of call ids hold one).
    return reverse("admin:chatbridge_chat_toolsession_change", args=[quote(session_id)])


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A record to look at: no add, no change, no delete (no Save or Delete buttons)."""

    empty_value_display = NOTHING

    class Media:
        css = ADMIN_CSS

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    empty_value_display = NOTHING
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# -- conversations -----------------------------------------------------------------------------


class MessageInline(ReadOnlyInline):
    model = Message
    fields = ("seq", "role", "text", "calls", "tool_call_id", "created_at")
    readonly_fields = fields

    @admin.display(description="content")
    def text(self, message: Message) -> SafeString | str:
        """A tool result's JSON folded and indented; other text as written (line breaks kept)."""
        if not message.content:
            return NOTHING
        if message.role == "tool":
            try:
                value = json.loads(message.content)
            except ValueError:
                value = None
            if isinstance(value, dict | list):
                return folded_json(value)
        return format_html('<div class="cb-text">{}</div>', message.content)

    @admin.display(description="tool calls")
    def calls(self, message: Message) -> SafeString | str:
        return folded_json(message.tool_calls) if message.tool_calls else NOTHING


class QueuedInline(ReadOnlyInline):
    model = QueueEntry
    verbose_name = "queued message"
    verbose_name_plural = "Queued messages (each starts the next turn)"
    fields = ("message_id", "text", "client_id", "created_at")
    readonly_fields = fields


class ConversationSessionInline(ReadOnlyInline):
    model = ToolSession
    verbose_name = "tool call"
    fields = ("call", "tool_name", "status", "started", "error")
    readonly_fields = fields
    ordering = ("created_at",)

    @admin.display(description="call")
    def call(self, session: ToolSession) -> SafeString:
        return format_html('<a href="{}">{}</a>', _session_url(session.id), session.id)

    @admin.display(description="started")
    def started(self, session: ToolSession) -> str:
        return when(session.created_at)


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdmin):
    list_display = ("title", "owner", "phase", "updated")
    list_filter = ("phase", ("updated_at", admin.DateFieldListFilter))
    search_fields = ("title", "owner", "id")
    fields = ("id", "owner", "title", "phase", "created", "updated")
    readonly_fields = fields
    inlines = (ConversationSessionInline, MessageInline, QueuedInline)

    @admin.display(description="created", ordering="created_at")
    def created(self, conversation: Conversation) -> str:
        return when(conversation.created_at)

    @admin.display(description="last activity", ordering="updated_at")
    def updated(self, conversation: Conversation) -> str:
        return ago(conversation.updated_at)


# -- URL questions ----------------------------------------------------------------------------


@admin.register(ElicitLink)
class ElicitLinkAdmin(ReadOnlyAdmin):
    """The one-time links of URL questions (``ctx.elicit_url``) and what their pages reported."""

    list_display = ("elicit_id", "tool_name", "key", "state", "age", "call")
    list_filter = ("tool_name", ("created_at", admin.DateFieldListFilter))
    search_fields = ("elicit_id", "call_id", "tool_name", "key", "message")
    fields = (
        "elicit_id",
        "call",
        "tool_name",
        "key",
        "message",
        "state",
        "params_json",
        "context_json",
        "answer",
        "created",
        "opened",
        "completed",
        "closed",
        "expires",
    )
    readonly_fields = fields

    @admin.display(description="state")
    def state(self, link: ElicitLink) -> str:
        if link.completed_at is not None:
            return "answered"
        if link.closed_at is not None:
            return "closed"
        if link.expires_at <= timezone.now():
            return "expired"
        return "opened" if link.opened_at is not None else "sent"

    @admin.display(description="age", ordering="-created_at")
    def age(self, link: ElicitLink) -> str:
        return elapsed(link.created_at)

    @admin.display(description="tool call")
    def call(self, link: ElicitLink) -> SafeString:
        return format_html('<a href="{}">{}</a>', _session_url(link.call_id), link.call_id)

    @admin.display(description="parameters")
    def params_json(self, link: ElicitLink) -> SafeString | str:
        return folded_json(link.params or None, open=True)

    @admin.display(description="context")
    def context_json(self, link: ElicitLink) -> SafeString | str:
        return folded_json(link.context or None)

    @admin.display(description="answer")
    def answer(self, link: ElicitLink) -> SafeString | str:
        return folded_json(link.result)

    @admin.display(description="created")
    def created(self, link: ElicitLink) -> str:
        return when(link.created_at)

    @admin.display(description="opened")
    def opened(self, link: ElicitLink) -> str:
        return when(link.opened_at)

    @admin.display(description="completed")
    def completed(self, link: ElicitLink) -> str:
        return when(link.completed_at)

    @admin.display(description="closed")
    def closed(self, link: ElicitLink) -> str:
        return when(link.closed_at)

    @admin.display(description="expires")
    def expires(self, link: ElicitLink) -> str:
        return local_stamp(link.expires_at)


# -- tool sessions -----------------------------------------------------------------------------


class JournalInline(ReadOnlyInline):
    model = JournalRecord
    verbose_name = "journal entry (question, sample or step)"
    verbose_name_plural = "journal: questions, samples and steps, in order"
    fields = ("seq", "kind", "key", "asked", "answer", "refused", "latency")
    readonly_fields = fields

    @admin.display(description="request")
    def asked(self, record: JournalRecord) -> SafeString | str:
        request = record.request or {}
        if record.kind == "sample":
            sampled = request.get("messages") or [{}]
            label = str(sampled[-1].get("content", "")).split("\n", 1)[0][:90]
            return folded_json(request, label=label)
        if record.kind == "step":
            return folded_json(request.get("args", request))
        return folded_json(request)

    @admin.display(description="answer")
    def answer(self, record: JournalRecord) -> SafeString | str:
        return "(waiting)" if record.result is None else folded_json(record.result)

    @admin.display(description="refused answers")
    def refused(self, record: JournalRecord) -> SafeString | str:
        return rejected_answers(record.rejected)

    @admin.display(description="latency")
    def latency(self, record: JournalRecord) -> str:
        return duration(record.latency_seconds)


class StartedFilter(admin.DateFieldListFilter):
    """Django's date filter on ``created_at``, titled for people."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.title = "started"


class AbortForm(forms.Form):
    reason = forms.CharField(
        max_length=300,
        initial=DEFAULT_ABORT_REASON,
        widget=forms.TextInput(attrs={"size": 60, "autocomplete": "off"}),
    )


@admin.register(ToolSession)
class ToolSessionAdmin(ReadOnlyAdmin):
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
    actions = ("abort_sessions",)
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
        ("Arguments and outcome", {"fields": ("arguments_json", "result_json", "error_text")}),
        ("Abort", {"fields": ("aborted_by", "abort_reason", "aborted")}),
        ("Commitment", {"fields": ("committed", "commitment_text", "commitment_json")}),
        (
            "Pending question",
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
        ("Times", {"fields": ("started", "updated", "ended", "resumes", "last_resumed")}),
        ("Log and progress", {"fields": ("logs_json", "progress_json")}),
        ("Origin", {"fields": ("meta_json",)}),
    )
    readonly_fields = tuple(
        name for _, options in fieldsets for name in cast(tuple[str, ...], options["fields"])
    )

    def get_fieldsets(self, request: HttpRequest, obj: ToolSession | None = None) -> Any:
        """Leave out the abort and pending-question sections when they have nothing to say."""
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None:
            return fieldsets
        empty = set()
        if not (obj.aborted_by or obj.aborted_at):
            empty.add("Abort")
        if not obj.pending_key:
            empty.add("Pending question")
        if not obj.committed:
            empty.add("Commitment")
        if not (obj.logs or obj.progress):
            empty.add("Log and progress")
        return [(name, options) for name, options in fieldsets if name not in empty]

    # -- columns and fields ----------------------------------------------------------------

    @admin.display(description="status", ordering="status")
    def status_badge(self, session: ToolSession) -> SafeString:
        # A class per status (admin.css): the site's policy allows no inline style.
        return format_html('<span class="cb-badge cb-{}">{}</span>', session.status, session.status)

    @admin.display(description="conversation", ordering="conversation__title")
    def conversation_link(self, session: ToolSession) -> SafeString | str:
        if session.conversation is None:
            return NOTHING
        return format_html(
            '<a href="{}">{}</a>',
            _conversation_url(session.conversation_id),
            session.conversation.title,
        )

    @admin.display(description="owner", ordering="conversation__owner")
    def owner(self, session: ToolSession) -> str:
        if session.conversation is not None:
            return session.conversation.owner
        meta = session.meta or {}
        if meta.get("user"):  # an MCP call made with a user's token
            return f"{meta['user']} (MCP token “{meta.get('token', '')}”)"
        return f"MCP client {session.client}" if session.client else NOTHING

    @admin.display(description="pending question")
    def pending_question(self, session: ToolSession) -> str:
        if not session.pending_key:
            return NOTHING
        first = (session.pending_message.splitlines() or [""])[0]
        return f"{session.pending_key}: {first[:80]}"

    @admin.display(description="waiting for", ordering="pending_since")
    def waiting(self, session: ToolSession) -> str:
        return elapsed(session.pending_since)

    @admin.display(description="age", ordering="-created_at")
    def age(self, session: ToolSession) -> str:
        return elapsed(session.created_at)

    @admin.display(description="arguments")
    def arguments_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.arguments, open=True)

    @admin.display(description="result")
    def result_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.result, open=True)

    @admin.display(description="error (exact text)")
    def error_text(self, session: ToolSession) -> SafeString | str:
        if not session.error:
            return NOTHING
        return format_html('<pre class="cb-error">{}</pre>', session.error)

    @admin.display(description="aborted")
    def aborted(self, session: ToolSession) -> str:
        return when(session.aborted_at)

    @admin.display(description="waiting since")
    def waiting_since(self, session: ToolSession) -> str:
        return when(session.pending_since)

    @admin.display(description="question context")
    def pending_context_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.pending_context)

    @admin.display(description="answer schema")
    def pending_schema_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.pending_schema)

    @admin.display(description="started")
    def started(self, session: ToolSession) -> str:
        return when(session.created_at)

    @admin.display(description="last change")
    def updated(self, session: ToolSession) -> str:
        return when(session.updated_at)

    @admin.display(description="ended")
    def ended(self, session: ToolSession) -> str:
        return when(session.ended_at)

    @admin.display(description="last resumed")
    def last_resumed(self, session: ToolSession) -> str:
        return when(session.last_resumed_at)

    @admin.display(description="meta")
    def meta_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.meta or None)

    @admin.display(description="what became of it")
    def commitment_text(self, session: ToolSession) -> str:
        note = session.commitment or {}
        if "outcome" in note:
            return CommitmentNote.from_dict(note).text() or "finished"
        if "abort_reason" in note:
            return f"asked to stop ({note['abort_reason']}); it finishes or compensates"
        return "committed; running" if session.active else "finished"

    @admin.display(description="record")
    def commitment_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.commitment or None)

    @admin.display(description="log lines (the last 50)")
    def logs_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.logs or None)

    @admin.display(description="latest progress")
    def progress_json(self, session: ToolSession) -> SafeString | str:
        return folded_json(session.progress or None)

    # -- abort -----------------------------------------------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        session = ToolSession.objects.filter(pk=object_id).only("pending_since").first()
        context = {
            **(extra_context or {}),
            "can_abort": self.has_abort_permission(request),
            "waiting_for": elapsed(session.pending_since if session else None),
        }
        return super().change_view(request, object_id, form_url, context)

    def has_abort_permission(self, request: HttpRequest) -> bool:
        """Operators who may change tool sessions may abort them (nothing else is editable)."""
        user = request.user
        return bool(
            user.is_active
            and user.is_staff
            and user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")
        )

    def _require_abort_permission(self, request: HttpRequest) -> None:
        if not self.has_abort_permission(request):
            raise PermissionDenied("Only staff with change permission may abort sessions.")

    def _confirm_abort(
        self,
        request: HttpRequest,
        live: list[ToolSession],
        skipped: list[ToolSession],
        form: AbortForm,
        hidden: list[tuple[str, str]],
        back: str,
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": f"Abort {_plural(len(live), 'live session')}?",
            "opts": self.model._meta,
            "live": [(s, elapsed(s.pending_since) if s.pending_since else "") for s in live],
            "skipped": skipped,
            "form": form,
            "hidden": hidden,
            "back": back,
        }
        return TemplateResponse(request, ABORT_TEMPLATE, context)

    @admin.action(description="Abort the selected live sessions…", permissions=["abort"])
    def abort_sessions(
        self, request: HttpRequest, queryset: QuerySet[ToolSession]
    ) -> HttpResponse | None:
        """A confirmation page with a reason first; then only the live sessions are aborted."""
        self._require_abort_permission(request)
        chosen = list(queryset.select_related("conversation").order_by("created_at"))
        live = [s for s in chosen if s.active]
        skipped = [s for s in chosen if not s.active]
        if not live:
            self.message_user(request, "None of the selected sessions is live.", messages.WARNING)
            return None
        form = AbortForm(request.POST if "post" in request.POST else None)
        if not form.is_valid():
            hidden = [("action", "abort_sessions"), ("post", "yes")]
            hidden += [(ACTION_CHECKBOX_NAME, str(s.pk)) for s in chosen]
            back = reverse("admin:chatbridge_chat_toolsession_changelist")
            return self._confirm_abort(request, live, skipped, form, hidden, back)
        reason = form.cleaned_data["reason"]
        operator = request.user.get_username()
        outcomes = [abort_tool_session(s, operator=operator, reason=reason) for s in live]
        text = f"Aborted {_plural(len(live), 'live session')}: “{reason}”."
        if skipped:
            text += f" {_plural(len(skipped), 'selected session')} "
            text += "was not live." if len(skipped) == 1 else "were not live."
        orphans = sum("held by no running worker" in o for o in outcomes)
        if orphans:
            text += f" {orphans} held by no running worker were marked aborted."
        self.message_user(request, text, messages.SUCCESS)
        return None

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "active/",
                self.admin_site.admin_view(self.active_view),
                name="chatbridge_active_sessions",
            ),
            path(
                "<path:object_id>/abort/",
                self.admin_site.admin_view(self.abort_view),
                name="chatbridge_abort_session",
            ),
        ]
        return own + super().get_urls()

    def active_view(self, request: HttpRequest) -> HttpResponse:
        """What the running workers hold right now (asked over the channel layer)."""
        workers = async_to_sync(query_workers)()
        ids = [s.get("id") for w in workers for s in w.get("sessions", [])]
        rows = ToolSession.objects.select_related("conversation").in_bulk(ids)
        for worker in workers:
            for shown in worker.get("sessions", []):
                row = rows.get(shown.get("id"))
                shown["idle"] = duration(shown.get("idle_seconds"))
                try:
                    shown["started"] = local_stamp(datetime.fromisoformat(shown["created_at"]))
                except (KeyError, TypeError, ValueError):
                    shown["started"] = NOTHING
                if row is not None and row.conversation is not None:
                    shown["conversation"] = row.conversation
        context = {
            **self.admin_site.each_context(request),
            "title": "Active sessions in the running workers",
            "workers": workers,
            "opts": self.model._meta,
            "can_abort": self.has_abort_permission(request),
        }
        return TemplateResponse(request, "admin/chatbridge_chat/toolsession/active.html", context)

    def abort_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """One session: the confirmation page (GET, or a POST without a reason), then abort."""
        self._require_abort_permission(request)
        session = get_object_or_404(
            ToolSession.objects.select_related("conversation"), pk=unquote(object_id)
        )
        back = _session_url(session.id)
        if not session.active:
            self.message_user(request, f"Session {session.id} is not live ({session.status}).")
            return HttpResponseRedirect(back)
        form = AbortForm(request.POST if request.method == "POST" else None)
        if not form.is_valid():
            return self._confirm_abort(request, [session], [], form, [], back)
        outcome = abort_tool_session(
            session, operator=request.user.get_username(), reason=form.cleaned_data["reason"]
        )
        self.message_user(request, outcome, messages.SUCCESS)
        return HttpResponseRedirect(back)
