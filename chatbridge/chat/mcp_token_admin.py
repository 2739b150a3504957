"""Django admin for users' MCP tokens: create (the token is shown once), list by user, revoke."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from chatbridge.chat.admin_display import NOTHING, ago, when
from chatbridge.records.mcp_tokens import issue_token, revoke_tokens
from chatbridge.records.models import McpToken

__all__ = ["McpTokenAdmin"]

CREATED_TEMPLATE = "admin/chatbridge_chat/mcptoken/created.html"


class RevokedFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", gettext("live")), ("revoked", gettext("revoked"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[McpToken]) -> QuerySet[McpToken]:
        if self.value() == "live":
            return queryset.filter(revoked_at=None)
        if self.value() == "revoked":
            return queryset.exclude(revoked_at=None)
        return queryset


@admin.register(McpToken)
class McpTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Tokens are created here (user and name) and revoked; nothing else about them changes."""

    list_display = ("name", "user", "prefix_shown", "state", "created", "last_used")
    list_filter = (RevokedFilter, "user")
    search_fields = ("name", "user__username", "prefix")
    list_select_related = ("user",)
    actions = ("revoke",)
    empty_value_display = NOTHING

    def get_fields(self, request: HttpRequest, obj: McpToken | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("user", "name")
        return ("user", "name", "prefix_shown", "state", "created", "last_used", "revoked_by")

    def get_readonly_fields(
        self, request: HttpRequest, obj: McpToken | None = None
    ) -> tuple[str, ...]:
        return () if obj is None else self.get_fields(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoked, not deleted: the calls made with it keep naming it

    def save_model(self, request: HttpRequest, obj: McpToken, form: Any, change: bool) -> None:
        if change:
            return  # nothing is editable once created
        request._chatbridge_new_token = issue_token(obj)  # type: ignore[attr-defined]

    def response_add(
        self, request: HttpRequest, obj: McpToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        """The token, once: this page is the only place it is ever shown."""
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("MCP token created"),
            "opts": self.model._meta,
            "token": obj,
            "secret": request._chatbridge_new_token,  # type: ignore[attr-defined]
        }
        return TemplateResponse(request, CREATED_TEMPLATE, context)

    @admin.display(description=_("token"))
    def prefix_shown(self, token: McpToken) -> str:
        return f"{token.prefix}…" if token.prefix else NOTHING

    @admin.display(description=_("state"), ordering="revoked_at")
    def state(self, token: McpToken) -> str:
        if token.revoked_at is None:
            return gettext("live")
        if token.revoked_by:
            return gettext("revoked %(when)s by %(user)s") % {
                "when": when(token.revoked_at),
                "user": token.revoked_by,
            }
        return gettext("revoked %(when)s") % {"when": when(token.revoked_at)}

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, token: McpToken) -> str:
        return when(token.created_at)

    @admin.display(description=_("last used"), ordering="last_used_at")
    def last_used(self, token: McpToken) -> str:
        return ago(token.last_used_at) if token.last_used_at else gettext("never")

    @admin.action(
        description=_("Revoke the selected tokens (their live calls are aborted)"),
        permissions=["change"],
    )
    def revoke(self, request: HttpRequest, queryset: QuerySet[McpToken]) -> None:
        revoked, aborted = revoke_tokens(queryset, request.user.get_username())
        text = ngettext("Revoked %(count)d token", "Revoked %(count)d tokens", revoked) % {
            "count": revoked
        }
        if aborted:
            text += ngettext(
                "; aborted %(count)d live call made with them",
                "; aborted %(count)d live calls made with them",
                aborted,
            ) % {"count": aborted}
        self.message_user(request, text + ".", messages.SUCCESS)
