"""System checks for a deployment: what would otherwise fail only when a page is served."""

from __future__ import annotations

from typing import Any

from django.contrib.staticfiles.storage import ManifestFilesMixin
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.files.storage import storages

__all__ = ["project_setup", "static_files_collected", "tools_over_mcp"]


@register(Tags.staticfiles, deploy=True)
def static_files_collected(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Production serves collected, hashed static files: without them every page fails."""
    storage = storages["staticfiles"]
    if not isinstance(storage, ManifestFilesMixin) or storage.exists(storage.manifest_name):
        return []
    return [
        Error(
            f"Static files are not collected in {storage.location}.",
            hint="Run `manage.py collectstatic --noinput` (docs/install.md, Production), or "
            "run with DEBUG = True for development (pages then use the apps' own files).",
            id="chatbridge.E001",
        )
    ]


# What the chat needs from the project (docs/install.md lists the steps).
REQUIRED_APPS = {
    "django.contrib.auth": "users own their chats",
    "django.contrib.contenttypes": "django.contrib.auth needs it",
    "django.contrib.sessions": "visitors without an account own their chats by session",
    "django.contrib.staticfiles": "the chat's styles and scripts are static files",
    "channels": "the chat's WebSocket",
    "django_htmx": "the chat's pages are htmx pages",
}
REQUIRED_MIDDLEWARE = {
    "django.contrib.sessions.middleware.SessionMiddleware": "the session owns a visitor's chats",
    "django.middleware.csrf.CsrfViewMiddleware": "the chat's forms are protected from CSRF",
    "django.contrib.auth.middleware.AuthenticationMiddleware": "users own their chats",
    "django_htmx.middleware.HtmxMiddleware": "the views answer htmx requests",
    "csp.middleware.CSPMiddleware": "the chat's pages send a Content-Security-Policy",
}
INSTALL_HINT = "See docs/install.md (adding ChatBridge to a project)."


@register(Tags.compatibility)
def project_setup(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The apps, middleware and settings the chat needs, each missing one named with why."""
    from django.conf import settings

    problems: list[CheckMessage] = [
        Error(
            f"ChatBridge needs {name!r} in {setting}: {why}.",
            hint=INSTALL_HINT,
            id=f"chatbridge.{code}",
        )
        for setting, required, code in (
            ("INSTALLED_APPS", REQUIRED_APPS, "E002"),
            ("MIDDLEWARE", REQUIRED_MIDDLEWARE, "E003"),
        )
        for name, why in required.items()
        if name not in set(getattr(settings, setting))
    ]
    if "daphne" not in settings.INSTALLED_APPS:
        problems.append(
            Warning(
                "manage.py runserver serves the chat's pages but not its WebSocket: Django's "
                'own runserver speaks WSGI. Put "daphne" first in INSTALLED_APPS (its '
                "runserver serves ASGI_APPLICATION, the socket included), or serve the project "
                "with daphne or uvicorn.",
                hint=INSTALL_HINT,
                id="chatbridge.W011",
            )
        )
    if not getattr(settings, "CHANNEL_LAYERS", None):
        problems.append(
            Error(
                "ChatBridge needs a channel layer (CHANNEL_LAYERS): the in-memory layer for one "
                "process, channels_redis for several.",
                hint=INSTALL_HINT,
                id="chatbridge.E004",
            )
        )
    return problems


FLAT_HINT = (
    "MCP form elicitation takes one field per value: strings, numbers, integers, booleans, "
    "choices (Literal or Enum) and lists of those. Make the answer's model flat, or declare "
    '.served_on("chat") on the tool to serve it in the chat only on purpose.'
)


@register(Tags.compatibility)
def tools_over_mcp(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A tool served over MCP whose answers an MCP form cannot carry is served in the chat
    only (the MCP server leaves it out rather than fail to start): said here, with the field."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    from chatbridge.author.exceptions import ToolDefinitionError
    from chatbridge.installed_plugins import build_registry
    from chatbridge.mcp.flat import flat_schemas

    try:
        registry = build_registry(getattr(settings, "CHATBRIDGE_PLUGINS", []))
    except ImproperlyConfigured:
        return []  # the app's start says what is wrong with the setting
    problems: list[CheckMessage] = []
    for plugin in registry.serving("mcp"):
        try:
            flat_schemas(plugin.tool)
        except ToolDefinitionError as exc:
            where = (
                "It is served in the chat only."
                if "chat" in plugin.tool.transports
                else 'It is served nowhere: it is declared .served_on("mcp") only.'
            )
            problems.append(Warning(f"{exc} {where}", hint=FLAT_HINT, id="chatbridge.W010"))
    return problems
