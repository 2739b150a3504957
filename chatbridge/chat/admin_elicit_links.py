"""Django admin for the one-time links of URL questions (``ctx.elicit_url``), read-only."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext

from chatbridge.chat.admin_display import elapsed, folded_json, local_stamp, session_url, when
from chatbridge.chat.admin_readonly import ReadOnlyAdmin
from chatbridge.records.models import ElicitLink

__all__ = ["ElicitLinkAdmin"]


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

    @admin.display(description=_("state"))
    def state(self, link: ElicitLink) -> str:
        if link.completed_at is not None:
            return pgettext("URL question link", "answered")
        if link.closed_at is not None:
            return pgettext("URL question link", "closed")
        if link.expires_at <= timezone.now():
            return pgettext("URL question link", "expired")
        if link.opened_at is not None:
            return pgettext("URL question link", "opened")
        return pgettext("URL question link", "sent")

    @admin.display(description=_("age"), ordering="-created_at")
    def age(self, link: ElicitLink) -> str:
        return elapsed(link.created_at)

    @admin.display(description=_("tool call"))
    def call(self, link: ElicitLink) -> SafeString:
        return format_html('<a href="{}">{}</a>', session_url(link.call_id), link.call_id)

    @admin.display(description=_("parameters"))
    def params_json(self, link: ElicitLink) -> SafeString | str:
        return folded_json(link.params or None, open=True)

    @admin.display(description=_("context"))
    def context_json(self, link: ElicitLink) -> SafeString | str:
        return folded_json(link.context or None)

    @admin.display(description=_("answer"))
    def answer(self, link: ElicitLink) -> SafeString | str:
        return folded_json(link.result)

    @admin.display(description=_("created"))
    def created(self, link: ElicitLink) -> str:
        return when(link.created_at)

    @admin.display(description=_("opened"))
    def opened(self, link: ElicitLink) -> str:
        return when(link.opened_at)

    @admin.display(description=_("completed"))
    def completed(self, link: ElicitLink) -> str:
        return when(link.completed_at)

    @admin.display(description=_("closed"))
    def closed(self, link: ElicitLink) -> str:
        return when(link.closed_at)

    @admin.display(description=_("expires"))
    def expires(self, link: ElicitLink) -> str:
        return local_stamp(link.expires_at)
