"""The chat's pages send a strict Content-Security-Policy (django-csp's middleware), whatever
policy the project sets for its own pages; guest UIs and URL-question pages keep their own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client, override_settings

from chatbridge.chat.checks import project_setup
from chatbridge.chat.views import GUEST_CSP, LINK_CSP
from chatbridge.records.models import Conversation, Message

pytestmark = pytest.mark.django_db

CHAT_POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "connect-src": "'self'",
    "frame-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def policy(header: str) -> dict[str, str]:
    """A policy header as directive → its sources."""
    parts = (part.strip().split(None, 1) for part in header.split(";") if part.strip())
    return {part[0]: part[1] if len(part) > 1 else "" for part in parts}


def _chat(client: Client) -> Conversation:
    chat = Conversation.objects.get(pk=client.get("/")["Location"].split("/")[2])
    Message.objects.create(id=f"{chat.id}-1", conversation=chat, seq=1, role="user", content="Hi")
    chat.title = "Hi"
    chat.save()
    return chat


def test_every_chat_page_sends_the_strict_policy(client: Client) -> None:
    chat = _chat(client)
    pages = [
        f"/c/{chat.id}/",
        "/tools/",
        f"/c/{chat.id}/rename/",
        f"/c/{chat.id}/delete/",
        f"/c/{chat.id}/item/",
        "/c/00000000-0000-0000-0000-000000000000/",  # the chat's own "not found" page
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code in (200, 404), url
        assert policy(response["Content-Security-Policy"]) == CHAT_POLICY, url
    # htmx's requests for fragments, and the home page's redirect, too.
    fragment = client.get(f"/c/{chat.id}/rename/", headers={"HX-Request": "true"})
    assert policy(fragment["Content-Security-Policy"]) == CHAT_POLICY
    assert policy(client.get("/")["Content-Security-Policy"]) == CHAT_POLICY


def test_the_chat_keeps_its_policy_whatever_the_project_sets(client: Client) -> None:
    chat = _chat(client)
    loose = {"DIRECTIVES": {"default-src": ["*"], "script-src": ["*", "'unsafe-inline'"]}}
    with override_settings(CONTENT_SECURITY_POLICY=loose):
        header = client.get(f"/c/{chat.id}/")["Content-Security-Policy"]
    assert policy(header) == CHAT_POLICY
    # A project that needs more says so with CHATBRIDGE_CSP (a django-csp DIRECTIVES dict).
    wider = {**{k: v.split() for k, v in CHAT_POLICY.items()}, "img-src": ["'self'", "https:"]}
    with override_settings(CHATBRIDGE_CSP=wider):
        header = client.get(f"/c/{chat.id}/")["Content-Security-Policy"]
    assert policy(header)["img-src"] == "'self' https:"


def test_guest_uis_and_url_pages_keep_their_own_policy(client: Client) -> None:
    assert client.get("/ui/color-picker/")["Content-Security-Policy"] == GUEST_CSP
    assert client.get("/elicit/no-such-token/")["Content-Security-Policy"] == LINK_CSP


def test_a_project_without_the_csp_middleware_is_told() -> None:
    kept = [m for m in settings.MIDDLEWARE if m != "csp.middleware.CSPMiddleware"]
    with override_settings(MIDDLEWARE=kept):
        problems = project_setup()
    assert [(p.id, p.msg) for p in problems] == [
        (
            "chatbridge.E003",
            "ChatBridge needs 'csp.middleware.CSPMiddleware' in MIDDLEWARE: the chat's pages "
            "send a Content-Security-Policy.",
        )
    ]


ROOT = Path(__file__).resolve().parent.parent
# Guest UIs run in a sandboxed frame with a policy of their own that allows their inline code.
GUEST_PAGES = {"plugins/choose_color/templates/choose_color/color_picker.html"}
INLINE = re.compile(
    r"<script(?![^>]*\bsrc=)[^>]*>|\shx-on[:-]|\son[a-z]+\s*=|\sstyle\s*=|javascript:", re.I
)


def test_no_template_the_chat_shows_has_inline_code_or_styles() -> None:
    templates = sorted(ROOT.glob("chatbridge/chat/templates/**/*.html"))
    templates += sorted(ROOT.glob("plugins/*/templates/**/*.html"))
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in templates
        if str(path.relative_to(ROOT)) not in GUEST_PAGES
        for match in INLINE.finditer(path.read_text())
    ]
    assert found == []
