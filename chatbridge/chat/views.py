"""Pages: the chat (with its conversation list), the tools overview, guest UIs and the pages
of URL questions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from uuid import UUID

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_not_required
from django.db import transaction
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST, require_safe
from django_htmx.middleware import HtmxDetails

from chatbridge.author.elicit import ElicitId
from chatbridge.author.exceptions import LinkUnusable
from chatbridge.author.plugins import UrlQuestion
from chatbridge.author.schema import FieldInfo, describe_fields
from chatbridge.author.storable import nul_at
from chatbridge.chat.chat_errors import nul_refusal
from chatbridge.chat.chat_list import chat_list, has_messages
from chatbridge.chat.rendering import transcript
from chatbridge.chat.reporting import UrlPageReporterFilter
from chatbridge.cluster import page_answers
from chatbridge.conf import setting
from chatbridge.installed_plugins import get_registry, get_ui_resources
from chatbridge.records import url_links as links
from chatbridge.records.models import ACTIVE_STATUSES, Conversation, ToolSession
from chatbridge.records.store import owner_key
from chatbridge.runtime import current_runtime

MAX_TITLE = 120  # Conversation.title's max_length


@dataclass(frozen=True)
class Surface:
    key: str
    model: str
    fields: list[FieldInfo]


@dataclass(frozen=True)
class ToolCard:
    name: str
    description: str
    parameters: list[FieldInfo]
    surfaces: list[Surface]


class HtmxHttpRequest(HttpRequest):
    """A request seen by django-htmx's ``HtmxMiddleware``: ``request.htmx`` says whether htmx
    sent it (and its target, trigger, current URL)."""

    htmx: HtmxDetails


def request_owner(request: HttpRequest) -> str:
    """The owner key of this browser (a session is started if there is none)."""
    if not request.user.is_authenticated and not request.session.session_key:
        request.session.save()
    owner = owner_key(request.user, request.session.session_key)
    assert owner is not None
    return owner


def _too_many_chats(request: HttpRequest, owner: str) -> HttpResponse | None:
    """The page refusing a new chat to a visitor who started the most allowed in the last
    hour (429, with when to try again), or None."""
    cap = setting("CHATBRIDGE_CONVERSATIONS_PER_HOUR")
    if cap is None:
        return None
    since = timezone.now() - timedelta(hours=1)
    recent = Conversation.objects.filter(owner=owner, created_at__gte=since).order_by("-created_at")
    oldest = (
        recent.values_list("created_at", flat=True)[cap - 1 : cap].first() if cap > 0 else since
    )
    if oldest is None:
        return None
    message = ngettext(
        "You have started %(count)d chat in the last hour, the most you may start in an hour. "
        "Continue in one of your chats, or start a new one later.",
        "You have started %(count)d chats in the last hour, the most you may start in an hour. "
        "Continue in one of your chats, or start a new one later.",
        cap,
    ) % {"count": cap}
    response = render(request, "chatbridge/too_many_chats.html", {"message": message}, status=429)
    response["Retry-After"] = str(max(1, int((oldest - since).total_seconds()) + 1))
    return response


@require_safe
def home(request: HttpRequest) -> HttpResponse:
    """The latest conversation of this browser, or a new one. A new visitor (no session yet)
    has none, and has started none this hour: their session and first chat are written in one
    transaction, and nothing is read."""
    cap = setting("CHATBRIDGE_CONVERSATIONS_PER_HOUR")
    new = not request.user.is_authenticated and not request.session.session_key
    if new and (cap is None or cap > 0):
        with transaction.atomic():
            request.session.save()
            first = Conversation.objects.create(owner=request_owner(request))
        return redirect("chatbridge:conversation", conversation_id=first.id)
    owner = request_owner(request)
    latest = Conversation.objects.filter(owner=owner).first()
    if latest is None:
        if (refused := _too_many_chats(request, owner)) is not None:
            return refused
        latest = Conversation.objects.create(owner=owner)
    return redirect("chatbridge:conversation", conversation_id=latest.id)


@require_POST
def new_conversation(request: HttpRequest) -> HttpResponse:
    """A fresh conversation: the owner's empty one if there is one (no clutter of empty
    chats), else a new one (up to CHATBRIDGE_CONVERSATIONS_PER_HOUR an hour)."""
    owner = request_owner(request)
    empty = Conversation.objects.filter(owner=owner).exclude(has_messages()).first()
    if empty is None:
        if (refused := _too_many_chats(request, owner)) is not None:
            return refused
        empty = Conversation.objects.create(owner=owner)
    else:
        empty.save(update_fields=["updated_at"])  # now the latest: "/" finds it again
    return redirect("chatbridge:conversation", conversation_id=empty.id)


def missing_page(request: HttpRequest) -> HttpResponse:
    """The page for an unknown conversation, or someone else's (the same page: it does not
    tell whether the conversation exists). Rendered here, so DEBUG shows it too."""
    return render(request, "chatbridge/conversation_missing.html", status=404)


def owned_conversation(request: HttpRequest, conversation_id: UUID) -> Conversation | None:
    return Conversation.objects.filter(pk=conversation_id, owner=request_owner(request)).first()


@require_safe
def conversation(request: HttpRequest, conversation_id: UUID) -> HttpResponse:
    """The chat page: sidebar, transcript from the database, composer; live over the socket."""
    owner = request_owner(request)
    current = Conversation.objects.filter(pk=conversation_id, owner=owner).first()
    if current is None:
        return missing_page(request)
    stored = list(current.messages.all())
    sessions = {row.id: row for row in ToolSession.objects.filter(conversation=current)}
    return render(
        request,
        "chatbridge/chat.html",
        {
            "conversation": current,
            "listing": chat_list(owner, current),  # the sidebar's first page
            "items": transcript(
                [{**m.as_llm_message(), "outcome": m.outcome} for m in stored],
                [m.id for m in stored],
                sessions,
                [m.abandoned for m in stored],
            ),
            "examples": example_prompts(),
        },
    )


def example_prompts() -> list[str]:
    """What an empty chat offers to send: each tool's example prompts (``.example()``), or
    its name in words."""
    prompts: list[str] = []
    for plugin in get_registry().serving("chat"):
        tool = plugin.tool
        prompts.extend(tool.examples or (tool.name.replace("_", " ").capitalize(),))
    return prompts


def _back(request: HttpRequest, conversation: Conversation) -> str:
    """Where to go after a sidebar action: the page it was made from (``next``), else the
    conversation itself."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return target
    return reverse("chatbridge:conversation", args=[conversation.id])


def _busy(conversation: Conversation) -> str:
    """Why the conversation cannot be deleted now, in words ("" when it can)."""
    live = ToolSession.objects.filter(conversation=conversation, status__in=ACTIVE_STATUSES)
    names = sorted({name.replace("_", " ") for name in live.values_list("tool_name", flat=True)})
    if names:
        return _(
            "This chat cannot be deleted yet: a tool is still working in it (%(tools)s)."
            " Finish or stop it first, then delete the chat."
        ) % {"tools": ", ".join(names)}
    expires = conversation.turn_expires
    if conversation.turn_worker and expires is not None and expires > timezone.now():
        return _(
            "This chat cannot be deleted yet: the assistant is still replying. "
            "Wait for the reply, then delete the chat."
        )
    return ""


def _sidebar_action(
    request: HttpRequest, template: str, context: dict[str, object], status: int = 200
) -> HttpResponse:
    """A sidebar action's form: a fragment for htmx (in place of the chat's list item), else
    a page of its own (no JavaScript needed)."""
    inline = context["inline"]
    page = "chatbridge/sidebar_item.html" if inline else "chatbridge/sidebar_action_page.html"
    return render(request, page, {**context, "action": template}, status=status)


def _action_context(request: HtmxHttpRequest, item: Conversation) -> dict[str, object]:
    back = _back(request, item)
    current = back == reverse("chatbridge:conversation", args=[item.id])
    return {
        "item": item,
        "next": back,
        "conversation": item if current else None,  # the chat whose page this is
        "inline": bool(request.htmx),  # django-htmx's HtmxMiddleware
    }


def rename_conversation(request: HtmxHttpRequest, conversation_id: UUID) -> HttpResponse:
    """Rename a chat: GET shows the form, POST (the owner's, with CSRF) saves the name."""
    if request.method not in ("GET", "HEAD", "POST"):
        return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
    item = owned_conversation(request, conversation_id)
    if item is None:
        return missing_page(request)
    context = _action_context(request, item)
    if request.method == "POST":
        title = " ".join(request.POST.get("title", "").split())
        error = _("Give the chat a name (or cancel).") if not title else ""
        if nul_at(title) is not None:  # PostgreSQL cannot store it: refused on every database
            error = nul_refusal(_("The name"))
        if error:
            context["error"] = error
            return _sidebar_action(request, "chatbridge/rename_form.html", context, status=400)
        item.title = title[:MAX_TITLE]
        item.save(update_fields=["title", "updated_at"])
        return redirect(_back(request, item))
    return _sidebar_action(request, "chatbridge/rename_form.html", context)


def delete_conversation(request: HtmxHttpRequest, conversation_id: UUID) -> HttpResponse:
    """Delete a chat: GET asks to confirm, POST (the owner's, with CSRF) deletes it, unless a
    tool or a reply is still running in it (then it says so and deletes nothing)."""
    if request.method not in ("GET", "HEAD", "POST"):
        return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
    item = owned_conversation(request, conversation_id)
    if item is None:
        return missing_page(request)
    context = _action_context(request, item)
    busy = _busy(item)
    if busy:
        context["error"] = busy
    if request.method == "POST":
        if busy:
            return _sidebar_action(request, "chatbridge/delete_form.html", context, status=409)
        deleting_current = context["conversation"] is not None
        back = str(context["next"])
        item.delete()
        return redirect("chatbridge:home" if deleting_current else back)
    return _sidebar_action(request, "chatbridge/delete_form.html", context)


@require_safe
def sidebar_item(request: HtmxHttpRequest, conversation_id: UUID) -> HttpResponse:
    """A chat's list item as the sidebar shows it (a cancelled rename or delete puts it back)."""
    item = owned_conversation(request, conversation_id)
    if item is None:
        return missing_page(request)
    context = {**_action_context(request, item), "focus": True}
    return render(request, "chatbridge/sidebar_item.html", context)


@require_safe
def tools(request: HttpRequest) -> HttpResponse:
    """The chat's tools, their parameters and what each may ask the user."""
    cards = [
        ToolCard(
            name=plugin.name,
            description=plugin.tool.description,
            parameters=describe_fields(plugin.tool.parameters_schema),
            surfaces=[
                Surface(key, model.__name__, describe_fields(model.model_json_schema()))
                for key, model in plugin.tool.elicits.items()
            ],
        )
        for plugin in get_registry().serving("chat")
    ]
    return render(request, "chatbridge/tools.html", {"tools": cards})


# A guest UI may run its own inline code and styles, and nothing else: no network, no forms,
# no navigation, and only this site may frame it (it runs in a sandboxed iframe).
GUEST_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; font-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"
)


@require_safe
@xframe_options_sameorigin
def guest_ui(request: HttpRequest, name: str) -> HttpResponse:
    """A plugin's guest UI page (``ui://<name>``), for the sandboxed iframe of a question."""
    template = get_ui_resources().get(f"ui://{name}")
    if template is None:
        raise Http404("No such guest UI.")
    response = render(request, template, {})
    response["Content-Security-Policy"] = GUEST_CSP
    response["Referrer-Policy"] = "no-referrer"
    response["X-Content-Type-Options"] = "nosniff"
    return response


LINK_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def _link_refused(request: HttpRequest, exc: LinkUnusable) -> HttpResponse:
    status = 404 if exc.reason == "unknown" else 410
    return render(request, "chatbridge/link_refused.html", {"reason": str(exc)}, status=status)


async def _expired(request: HttpRequest, token: str) -> HttpResponse | None:
    """The owner of the chat that asked goes on to a fresh link of its open question (a
    POST's values are not carried over: the page asks for them again)."""
    user = await request.auser()
    fresh = await links.renew(token, owner_key(user, request.session.session_key))
    if fresh is None:
        return None
    return HttpResponseRedirect(reverse("chatbridge:elicit_link", args=[fresh]), status=303)


# Open to visitors without an account under LoginRequiredMiddleware: the link is the
# credential, and whoever an MCP client asks may have no account here.
@login_not_required
@sensitive_post_parameters()  # what such a page takes is why it is not in the chat
async def elicit_link(request: HttpRequest, token: str) -> HttpResponse:
    """The page of a URL question (``ctx.elicit_url``): the plugin's page for its key, behind
    the question's one-time link; unknown, expired and used links get a page saying so.
    Django's error reports (logged, mailed) and its DEBUG page show none of its POST values
    and none of its locals."""
    request.exception_reporter_filter = UrlPageReporterFilter()
    if request.method not in ("GET", "HEAD", "POST"):
        return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
    try:
        row = await sync_to_async(links.find)(token, visit=request.method == "GET")
    except LinkUnusable as exc:
        response = await _expired(request, token) if exc.reason == "expired" else None
        response = response or _link_refused(request, exc)
    else:
        plugin = get_registry().get(row.tool_name)
        page = plugin.url_pages.get(row.key) if plugin is not None else None
        if page is None:
            response = _link_refused(request, LinkUnusable("unknown"))
        else:
            question = UrlQuestion(
                elicit_id=ElicitId.parse(row.elicit_id),
                message=row.message,
                context=row.context,
                params=row.params,
                complete=partial(page_answers.complete, row, current_runtime().manager),
            )
            try:
                response = await page(request, question)
            except LinkUnusable as exc:  # used or expired while the page was open
                response = await _expired(request, token) if exc.reason == "expired" else None
                response = response or _link_refused(request, exc)
    response["Cache-Control"] = "no-store"
    # The token is in the path: no other site sees it as a referrer. Not "no-referrer": a
    # browser then posts the page's form with "Origin: null", which CSRF checking refuses.
    response["Referrer-Policy"] = "same-origin"
    response["X-Frame-Options"] = "DENY"
    response.setdefault("Content-Security-Policy", LINK_CSP)
    return response
