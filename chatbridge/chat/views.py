"""Pages: the chat (with its conversation list), the tools overview, guest UIs and the pages
of URL questions."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from uuid import UUID

from asgiref.sync import sync_to_async
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.shortcuts import redirect, render
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST, require_safe

from chatbridge.chat import links
from chatbridge.chat.models import Conversation, ToolSession
from chatbridge.chat.registry import get_registry, get_ui_resources
from chatbridge.chat.rendering import transcript
from chatbridge.chat.store import owner_key
from chatbridge.core.elicit import ElicitId
from chatbridge.core.exceptions import LinkUnusable
from chatbridge.core.links import UrlQuestion
from chatbridge.core.schema import FieldInfo, describe_fields

SIDEBAR_SIZE = 50


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


def request_owner(request: HttpRequest) -> str:
    """The owner key of this browser (a session is started if there is none)."""
    if not request.user.is_authenticated and not request.session.session_key:
        request.session.save()
    owner = owner_key(request.user, request.session.session_key)
    assert owner is not None
    return owner


@require_safe
def home(request: HttpRequest) -> HttpResponseRedirect:
    """The latest conversation of this browser, or a new one."""
    owner = request_owner(request)
    conversation = Conversation.objects.filter(owner=owner).first()
    if conversation is None:
        conversation = Conversation.objects.create(owner=owner)
    return redirect("conversation", conversation_id=conversation.id)


@require_POST
def new_conversation(request: HttpRequest) -> HttpResponseRedirect:
    conversation = Conversation.objects.create(owner=request_owner(request))
    return redirect("conversation", conversation_id=conversation.id)


@require_safe
def conversation(request: HttpRequest, conversation_id: UUID) -> HttpResponse:
    """The chat page: sidebar, transcript from the database, composer; live over the socket."""
    owner = request_owner(request)
    current = Conversation.objects.filter(pk=conversation_id, owner=owner).first()
    if current is None:
        raise Http404("No such conversation.")
    stored = list(current.messages.all())
    sessions = {row.id: row for row in ToolSession.objects.filter(conversation=current)}
    return render(
        request,
        "chatbridge/chat.html",
        {
            "conversation": current,
            "conversations": Conversation.objects.filter(owner=owner)[:SIDEBAR_SIZE],
            "items": transcript(
                [m.as_llm_message() for m in stored], [m.id for m in stored], sessions
            ),
            "tools": [p.name for p in get_registry()],
        },
    )


@require_safe
def tools(request: HttpRequest) -> HttpResponse:
    """The registered tools, their parameters and what each may ask the user."""
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
        for plugin in get_registry()
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


@sensitive_post_parameters()  # what such a page takes is why it is not in the chat
async def elicit_link(request: HttpRequest, token: str) -> HttpResponse:
    """The page of a URL question (``ctx.elicit_url``): the plugin's page for its key, behind
    the question's one-time link; unknown, expired and used links get a page saying so.
    Django's error reports (logged, mailed) show none of its POST values."""
    if request.method not in ("GET", "HEAD", "POST"):
        return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
    try:
        row = await sync_to_async(links.find)(token, visit=request.method == "GET")
    except LinkUnusable as exc:
        response = _link_refused(request, exc)
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
                complete=partial(links.complete, token),
            )
            try:
                response = await page(request, question)
            except LinkUnusable as exc:  # used or expired while the page was open
                response = _link_refused(request, exc)
    response["Cache-Control"] = "no-store"
    # The token is in the path: no other site sees it as a referrer. Not "no-referrer": a
    # browser then posts the page's form with "Origin: null", which CSRF checking refuses.
    response["Referrer-Policy"] = "same-origin"
    response["X-Frame-Options"] = "DENY"
    response.setdefault("Content-Security-Policy", LINK_CSP)
    return response
