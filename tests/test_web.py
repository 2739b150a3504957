"""The home page lists the registered tools, served by Django and by a real daphne."""

from __future__ import annotations

import urllib.request

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from pytest_django.fixtures import Settings

from chatbridge.installed_plugins import get_registry


def test_tools_page_lists_tools_parameters_and_questions(client: Client) -> None:
    response = client.get("/tools/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<code>book_flight</code>" in html
    assert "Book a flight for the user" in html
    for text in (
        "origin",
        "destination",
        "Departure airport, e.g. JFK",
        "pick_flight",
        "answered as PickFlight",
        "pick_seat",
        "answered as PickSeat",
        "choice: A, B, C, D, E, F",
        "Seat row",
    ):
        assert text in html, text


def test_tools_page_refuses_posts(client: Client) -> None:
    assert client.post("/tools/").status_code == 405


def test_tool_text_is_escaped(client: Client, settings: Settings) -> None:
    settings.CHATBRIDGE_PLUGINS = ["tests.support.hostile_plugin"]
    get_registry.cache_clear()
    try:
        html = client.get("/tools/").content.decode()
    finally:
        get_registry.cache_clear()
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;script&gt;alert(&#x27;field&#x27;)&lt;/script&gt;" in html


def test_a_misconfigured_plugin_path_is_a_clear_error(settings: Settings) -> None:
    get_registry.cache_clear()
    try:
        settings.CHATBRIDGE_PLUGINS = ["tests.support.trip_tool"]
        with pytest.raises(
            ImproperlyConfigured, match="'tests.support.trip_tool' is a McpTool, not a Plugin"
        ):
            get_registry()
        settings.CHATBRIDGE_PLUGINS = ["tests.nowhere.plugin"]
        with pytest.raises(ImproperlyConfigured, match="cannot import 'tests.nowhere.plugin'"):
            get_registry()
    finally:
        get_registry.cache_clear()


def test_daphne_serves_the_tools_page_and_its_stylesheet(server: str) -> None:
    with urllib.request.urlopen(server + "/tools/", timeout=10) as response:
        assert response.status == 200
        html = response.read().decode()
    assert "<code>book_flight</code>" in html and "pick_seat" in html
    with urllib.request.urlopen(server + "/static/chatbridge/chat.css", timeout=10) as response:
        assert response.status == 200
        assert b"prefers-color-scheme: dark" in response.read()


async def test_the_runtime_has_one_session_manager_configured_from_settings() -> None:
    from django.conf import settings

    from chatbridge.runtime import ChatBridgeRuntime, RuntimeNotRunning, current_runtime

    with pytest.raises(RuntimeNotRunning, match="runtime is not running"):
        current_runtime()
    async with ChatBridgeRuntime.from_settings() as runtime:
        manager = current_runtime().manager
        assert manager is runtime.manager and runtime.hub.manager is manager
    with pytest.raises(RuntimeNotRunning):
        current_runtime()
    assert manager.idle_timeout == settings.CHATBRIDGE_SESSION_IDLE_TIMEOUT
    assert manager.sampler.model == settings.CHATBRIDGE_MODEL  # type: ignore[attr-defined]
