"""Django admin for conversations: their messages, queued messages and tool calls, read-only."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from chatbridge.chat.admin_display import NOTHING, ago, folded_json, session_url, when
from chatbridge.chat.admin_readonly import ReadOnlyAdmin, ReadOnlyInline
from chatbridge.records.models import Conversation, Message, QueueEntry, ToolSession

__all__ = ["ConversationAdmin"]


class MessageInline(ReadOnlyInline):
    model = Message
    fields = ("seq", "role", "text", "calls", "tool_call_id", "created_at")
    readonly_fields = fields

    @admin.display(description=_("content"))
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

    @admin.display(description=_("tool calls"))
    def calls(self, message: Message) -> SafeString | str:
        return folded_json(message.tool_calls) if message.tool_calls else NOTHING


class QueuedInline(ReadOnlyInline):
    model = QueueEntry
    verbose_name = _("queued message")
    verbose_name_plural = _("Queued messages (each starts the next turn)")
    fields = ("message_id", "text", "client_id", "created_at")
    readonly_fields = fields


class ConversationSessionInline(ReadOnlyInline):
    model = ToolSession
    verbose_name = _("tool call")
    fields = ("call", "tool_name", "status", "started", "error")
    readonly_fields = fields
    ordering = ("created_at",)

    @admin.display(description=_("call"))
    def call(self, session: ToolSession) -> SafeString:
        return format_html('<a href="{}">{}</a>', session_url(session.id), session.id)

    @admin.display(description=_("started"))
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

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, conversation: Conversation) -> str:
        return when(conversation.created_at)

    @admin.display(description=_("last activity"), ordering="updated_at")
    def updated(self, conversation: Conversation) -> str:
        return ago(conversation.updated_at)
