"""What an operator does with live tool sessions in the admin: see what the running workers
hold, and abort, always through a confirmation page that asks for a reason."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from chatbridge.chat.admin_display import NOTHING, duration, elapsed, local_stamp, session_url
from chatbridge.chat.admin_readonly import ReadOnlyAdmin
from chatbridge.chat.operations import abort_tool_session
from chatbridge.cluster.peers import query_workers
from chatbridge.records.models import ToolSession

__all__ = ["AbortForm", "LiveSessionsAdmin"]

ABORT_TEMPLATE = "admin/chatbridge_chat/toolsession/abort_confirm.html"
ACTIVE_TEMPLATE = "admin/chatbridge_chat/toolsession/active.html"


class AbortForm(forms.Form):
    """The reason an operator gives for aborting (shown to the user and kept on record)."""

    reason = forms.CharField(
        max_length=300,  # no default: the person reads it, so an operator writes it for them
        widget=forms.TextInput(attrs={"size": 60, "autocomplete": "off"}),
    )


class LiveSessionsAdmin(ReadOnlyAdmin):
    """The tool-session admin's live side: the page of what the running workers hold (also
    linked from the change list), the abort action and the abort page of one session."""

    actions = ("abort_sessions",)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # The URL's id is quoted the admin's way (call_5F…): read the row by the id itself.
        session = ToolSession.objects.filter(pk=unquote(object_id)).only("pending_since").first()
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
            "title": ngettext(
                "Abort %(count)d live session?", "Abort %(count)d live sessions?", len(live)
            )
            % {"count": len(live)},
            "opts": self.model._meta,
            "live": [(s, elapsed(s.pending_since) if s.pending_since else "") for s in live],
            "skipped": skipped,
            "form": form,
            "hidden": hidden,
            "back": back,
        }
        return TemplateResponse(request, ABORT_TEMPLATE, context)

    @admin.action(description=_("Abort the selected live sessions…"), permissions=["abort"])
    def abort_sessions(
        self, request: HttpRequest, queryset: QuerySet[ToolSession]
    ) -> HttpResponse | None:
        """A confirmation page with a reason first; then only the live sessions are aborted."""
        self._require_abort_permission(request)
        chosen = list(queryset.select_related("conversation").order_by("created_at"))
        live = [s for s in chosen if s.active]
        skipped = [s for s in chosen if not s.active]
        if not live:
            self.message_user(
                request, gettext("None of the selected sessions is live."), messages.WARNING
            )
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
        text = ngettext(
            "Aborted %(count)d live session: “%(reason)s”.",
            "Aborted %(count)d live sessions: “%(reason)s”.",
            len(live),
        ) % {"count": len(live), "reason": reason}
        if skipped:
            text += " " + ngettext(
                "%(count)d selected session was not live.",
                "%(count)d selected sessions were not live.",
                len(skipped),
            ) % {"count": len(skipped)}
        orphans = sum("held by no running worker" in o for o in outcomes)
        if orphans:
            text += " " + gettext("%(count)d held by no running worker were marked aborted.") % {
                "count": orphans
            }
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
            "title": gettext("Active sessions in the running workers"),
            "workers": workers,
            "opts": self.model._meta,
            "can_abort": self.has_abort_permission(request),
        }
        return TemplateResponse(request, ACTIVE_TEMPLATE, context)

    def abort_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """One session: the confirmation page (GET, or a POST without a reason), then abort."""
        self._require_abort_permission(request)
        session = get_object_or_404(
            ToolSession.objects.select_related("conversation"), pk=unquote(object_id)
        )
        back = session_url(session.id)
        if not session.active:
            self.message_user(
                request,
                gettext("Session %(id)s is not live (%(status)s).")
                % {"id": session.id, "status": session.status},
            )
            return HttpResponseRedirect(back)
        form = AbortForm(request.POST if request.method == "POST" else None)
        if not form.is_valid():
            return self._confirm_abort(request, [session], [], form, [], back)
        outcome = abort_tool_session(
            session, operator=request.user.get_username(), reason=form.cleaned_data["reason"]
        )
        self.message_user(request, outcome, messages.SUCCESS)
        return HttpResponseRedirect(back)
