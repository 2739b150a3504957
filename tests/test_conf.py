"""A project's ChatBridge settings: every one has a default, and what the chat needs from the
project (apps, middleware, a channel layer) is checked at start-up, each missing piece named."""

from __future__ import annotations

from typing import Any

import pytest
from channels.layers import channel_layers
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from chatbridge import ElicitRequest
from chatbridge.chat.checks import INSTALL_HINT, project_setup
from chatbridge.chat.rendering import render_form
from chatbridge.conf import DEFAULTS, setting
from chatbridge.runtime import ChatBridgeRuntime
from tests.chat_client import ChatClient


def test_this_project_has_everything_the_chat_needs() -> None:
    assert project_setup() == []


def test_missing_middleware_and_channel_layer_are_named_with_why() -> None:
    kept = [m for m in settings.MIDDLEWARE if "htmx" not in m and "csrf" not in m.lower()]
    with override_settings(MIDDLEWARE=kept, CHANNEL_LAYERS={}):
        problems = project_setup()
    assert [(p.id, p.msg) for p in problems] == [
        (
            "chatbridge.E003",
            "ChatBridge needs 'django.middleware.csrf.CsrfViewMiddleware' in MIDDLEWARE: the "
            "chat's forms are protected from CSRF.",
        ),
        (
            "chatbridge.E003",
            "ChatBridge needs 'django_htmx.middleware.HtmxMiddleware' in MIDDLEWARE: the views "
            "answer htmx requests.",
        ),
        (
            "chatbridge.E004",
            "ChatBridge needs a channel layer (CHANNEL_LAYERS): the in-memory layer for one "
            "process, channels_redis for several.",
        ),
    ]
    assert {p.hint for p in problems} == {INSTALL_HINT}


def test_without_daphne_the_check_says_runserver_will_not_serve_the_socket() -> None:
    apps = [a for a in settings.INSTALLED_APPS if a != "daphne"]
    with override_settings(INSTALLED_APPS=apps):
        [problem] = project_setup()
    assert problem.id == "chatbridge.W011" and problem.is_serious() is False
    assert problem.msg.startswith(
        "manage.py runserver serves the chat's pages but not its WebSocket"
    )
    assert 'Put "daphne" first in INSTALLED_APPS' in problem.msg


def test_settings_a_project_leaves_out_take_their_defaults() -> None:
    with override_settings():
        del settings.CHATBRIDGE_MODEL
        del settings.CHATBRIDGE_MCP_PUBLIC
        assert setting("CHATBRIDGE_MODEL") == DEFAULTS["CHATBRIDGE_MODEL"]
        with override_settings(DEBUG=True):
            assert setting("CHATBRIDGE_MCP_PUBLIC") is True  # open in debug only
        with override_settings(DEBUG=False):
            assert setting("CHATBRIDGE_MCP_PUBLIC") is False
    with override_settings(CHATBRIDGE_WS_RATE=3.0):
        assert setting("CHATBRIDGE_WS_RATE") == 3.0
    with pytest.raises(KeyError, match="CHATBRIDGE_NOPE is not a ChatBridge setting"):
        setting("CHATBRIDGE_NOPE")


def project_card(
    request: ElicitRequest,
    template_name: str,
    context: dict[str, Any],
    errors: dict[str, list[str]],
    *,
    session_id: str,
) -> str:
    """A project's own card around ChatBridge's (CHATBRIDGE_FORM_RENDERER names it)."""
    card = render_form(request, template_name, context, errors, session_id=session_id)
    return f'<section class="project-card" data-key="{request.key}">{card}</section>'


@pytest.mark.django_db(transaction=True)
async def test_a_projects_form_renderer_draws_each_question_card() -> None:
    channel_layers.backends.clear()
    with override_settings(CHATBRIDGE_FORM_RENDERER="tests.test_conf.project_card"):
        runtime = ChatBridgeRuntime.from_settings()
    await runtime.start()
    try:
        chat = await ChatClient.start()
        await chat.send_user("Book a flight from JFK to LAX")
        flights = await chat.next("elicit", key="pick_flight")
        await chat.close()
    finally:
        await runtime.aclose()
    html = flights["html"]
    assert html.startswith('<section class="project-card" data-key="pick_flight">')
    assert 'name="flight_id"' in html  # the plugin's form, inside ChatBridge's card


def test_a_form_renderer_that_cannot_be_imported_is_named_at_start() -> None:
    with (
        override_settings(CHATBRIDGE_FORM_RENDERER="mysite.cards.nowhere"),
        pytest.raises(ImproperlyConfigured, match="CHATBRIDGE_FORM_RENDERER = 'mysite.cards"),
    ):
        ChatBridgeRuntime.from_settings()
