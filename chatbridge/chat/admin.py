"""Django admin: conversations, tool sessions with their journal, live sessions, abort."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince
from django.views.decorators.http import require_POST

from chatbridge.chat.models import (
    ACTIVE_STATUSES,
    Conversation,
    JournalRecord,
    Message,
    ToolSession,
)
from chatbridge.chat.operations import abort_tool_session
from chatbridge.chat.workers import query_workers

BADGE_COLOURS = {
    "running": "#2454d6",
    "awaiting_elicit": "#8a5a00",
    "awaiting_sample": "#6b3fb5",
    "completed": "#1a7f37",
    "failed": "#c62828",
    "aborted": "#6e6e6e",
}


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MessageInline(ReadOnlyInline):
    model = Message
    fields = ("seq", "role", "content", "tool_calls", "tool_call_id", "created_at")
    readonly_fields = fields


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("title", "owner", "phase", "updated_at")
    list_filter = ("phase",)
    search_fields = ("title", "owner", "id")
    readonly_fields = ("id", "owner", "title", "phase", "created_at", "updated_at")
    inlines = (MessageInline,)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class JournalInline(ReadOnlyInline):
    model = JournalRecord
    fields = ("seq", "kind", "key", "asked", "answer", "rejected_answers", "latency")
    readonly_fields = fields

    @admin.display(description="request")
    def asked(self, record: JournalRecord) -> str:
        request = record.request or {}
        if record.kind == "elicit":
            headline = str(request.get("message", "")).split("\n", 1)[0]
        elif record.kind == "sample":
            messages = request.get("messages") or [{}]
            headline = str(messages[-1].get("content", ""))
        else:
            headline = f"args {json.dumps(request.get('args'), ensure_ascii=False)}"
        return format_html(
            "{}<details><summary>full request</summary><pre>{}</pre></details>",
            headline[:200],
            json.dumps(request, ensure_ascii=False, indent=1)[:20000],
        )

    @admin.display(description="answer")
    def answer(self, record: JournalRecord) -> Any:
        return record.result if record.result is not None else "(waiting)"

    @admin.display(description="rejected answers")
    def rejected_answers(self, record: JournalRecord) -> str:
        return "; ".join(f"{r.get('data')} → {r.get('errors')}" for r in record.rejected) or "—"

    @admin.display(description="latency")
    def latency(self, record: JournalRecord) -> str:
        seconds = record.latency_seconds
        return "—" if seconds is None else f"{seconds:.2f} s"


class AgeFilter(admin.SimpleListFilter):
    title = "age"
    parameter_name = "age"
    SPANS = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("1h", "Last hour"),
            ("24h", "Last 24 hours"),
            ("7d", "Last 7 days"),
            ("older", "Older than 7 days"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in self.SPANS:
            return queryset.filter(created_at__gte=timezone.now() - self.SPANS[value])
        if value == "older":
            return queryset.filter(created_at__lt=timezone.now() - self.SPANS["7d"])
        return queryset


@admin.register(ToolSession)
class ToolSessionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "id",
        "tool_name",
        "status_badge",
        "pending_question",
        "waiting",
        "transport",
        "client",
        "worker",
        "created_at",
    )
    list_filter = ("status", "tool_name", "transport", AgeFilter)
    search_fields = ("id", "tool_name", "pending_message", "conversation__title")
    inlines = (JournalInline,)
    actions = ("abort_sessions",)
    change_form_template = "admin/chatbridge_chat/toolsession/change_form.html"
    change_list_template = "admin/chatbridge_chat/toolsession/change_list.html"
    readonly_fields = [f.name for f in ToolSession._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="status", ordering="status")
    def status_badge(self, session: ToolSession) -> str:
        colour = BADGE_COLOURS.get(session.status, "#6e6e6e")
        return format_html(
            '<span class="cb-badge" style="background:{};color:#fff;padding:2px 8px;'
            'border-radius:10px;font-size:11px">{}</span>',
            colour,
            session.status,
        )

    @admin.display(description="pending question")
    def pending_question(self, session: ToolSession) -> str:
        if not session.pending_key:
            return "—"
        return f"{session.pending_key}: {session.pending_message.splitlines()[0][:80]}"

    @admin.display(description="waiting for")
    def waiting(self, session: ToolSession) -> str:
        return timesince(session.pending_since) if session.pending_since else "—"

    @admin.action(description="Abort the selected live sessions")
    def abort_sessions(self, request: HttpRequest, queryset: QuerySet[ToolSession]) -> None:
        self._require_abort_permission(request)
        live = list(queryset.filter(status__in=ACTIVE_STATUSES))
        for session in live:
            outcome = abort_tool_session(session, operator=request.user.get_username())
            self.message_user(request, outcome, messages.SUCCESS)
        if not live:
            self.message_user(request, "None of the selected sessions is live.", messages.WARNING)

    def _require_abort_permission(self, request: HttpRequest) -> None:
        if not (
            request.user.is_active and request.user.is_staff and self.has_change_permission(request)
        ):
            raise PermissionDenied("Only staff with change permission may abort sessions.")

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "active/",
                self.admin_site.admin_view(self.active_view),
                name="chatbridge_active_sessions",
            ),
            path(
                "<path:object_id>/abort/",
                self.admin_site.admin_view(require_POST(self.abort_view)),
                name="chatbridge_abort_session",
            ),
        ]
        return own + super().get_urls()

    def active_view(self, request: HttpRequest) -> HttpResponse:
        """What the running workers hold right now (asked over the channel layer)."""
        workers = async_to_sync(query_workers)()
        context = {
            **self.admin_site.each_context(request),
            "title": "Active sessions in the running workers",
            "workers": workers,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/chatbridge_chat/toolsession/active.html", context)

    def abort_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        self._require_abort_permission(request)
        session = get_object_or_404(ToolSession, pk=object_id)
        reason = str(request.POST.get("reason") or "").strip()[:300]
        outcome = abort_tool_session(session, operator=request.user.get_username(), reason=reason)
        self.message_user(request, outcome, messages.SUCCESS)
        return HttpResponseRedirect(
            reverse("admin:chatbridge_chat_toolsession_change", args=[object_id])
        )
