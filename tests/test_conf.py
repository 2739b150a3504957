"""A project's ChatBridge settings: every one has a default, and what the chat needs from the
project (apps, middleware, a channel layer) is checked at start-up, each missing piece named."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from chatbridge.chat.checks import INSTALL_HINT, project_setup
from chatbridge.conf import DEFAULTS, setting


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
