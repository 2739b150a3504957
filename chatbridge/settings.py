"""Django settings for ChatBridge.

Embedded default: SQLite, the in-memory channel layer and the offline model, so the app runs
with no network and no key. Scale out with environment variables:

- ``DATABASE_URL``   ``postgres://user:pass@host:5432/name`` (or ``sqlite:///path``)
- ``REDIS_URL``      ``redis://host:6379/0`` selects the ``channels_redis`` layer
- ``CHATBRIDGE_MODEL`` any litellm model string (default ``offline/chatbridge-1``)
- ``DJANGO_DEBUG``, ``DJANGO_SECRET_KEY``, ``DJANGO_ALLOWED_HOSTS`` (comma-separated)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

# Before anything can import litellm: never download the model price map.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


def database_from_url(url: str) -> dict[str, Any]:
    """A ``DATABASES`` entry from a ``postgres://`` or ``sqlite:///`` URL."""
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql", "pgsql"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")) or "postgres",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            # Reuse connections (checked before reuse) instead of one per request.
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }
    if parts.scheme == "sqlite":
        name = unquote(parts.path)[1:] if parts.path.startswith("//") else unquote(parts.path)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name or ":memory:",
            "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
        }
    raise ImproperlyConfigured(
        f"DATABASE_URL scheme {parts.scheme!r} is not supported; use postgres:// or sqlite:///"
    )


DEBUG = _env_flag("DJANGO_DEBUG", True)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("Set DJANGO_SECRET_KEY when DJANGO_DEBUG is off.")
    SECRET_KEY = "chatbridge-development-only-not-secret"  # noqa: S105 - dev default

ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")
    if h.strip()
]

INSTALLED_APPS = [
    "daphne",  # first: its runserver serves WebSockets (system check daphne.E001)
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "chatbridge.chat",
    "plugins.book_flight",
    "plugins.pick_card",
    "plugins.feedback",
    "plugins.choose_color",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "chatbridge.urls"
ASGI_APPLICATION = "chatbridge.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

_database_url = os.environ.get("DATABASE_URL")
DATABASES = {
    "default": database_from_url(_database_url)
    if _database_url
    else {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BASE_DIR / "db.sqlite3",
        # WAL: readers do not wait for the writer; NORMAL: no fsync on every commit.
        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
        # A file, not :memory:, so live-server tests in other threads/processes see the data.
        "TEST": {"NAME": BASE_DIR / "test-db.sqlite3"},
    }
}

_redis_url = os.environ.get("REDIS_URL")
CHANNEL_LAYERS: dict[str, Any] = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py 8 drops idle connections after ~5 s unless socket_timeout is None, and
            # caps its pool at 100 connections, erroring instead of waiting.
            "hosts": [{"address": _redis_url, "socket_timeout": None, "max_connections": 1000}],
            # Separate deployments (or test runs) sharing one Redis keep apart by prefix.
            "prefix": os.environ.get("CHATBRIDGE_REDIS_PREFIX", "asgi"),
        },
    }
    if _redis_url
    else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# ChatBridge
CHATBRIDGE_MODEL = os.environ.get("CHATBRIDGE_MODEL") or "offline/chatbridge-1"
# Dotted paths of the Plugin objects to serve (their apps are in INSTALLED_APPS).
CHATBRIDGE_PLUGINS = [
    "plugins.book_flight.plugin.book_flight_plugin",
    "plugins.pick_card.tool.pick_card",  # a create_tool tool: it carries its .plugin
    "plugins.feedback.tool.feedback_plugin",
    "plugins.choose_color.tool.choose_color_plugin",
]
# Seconds a tool may wait for an answer before its session is aborted (None: never).
CHATBRIDGE_SESSION_IDLE_TIMEOUT = float(os.environ.get("CHATBRIDGE_SESSION_IDLE_TIMEOUT", "3600"))

# WebSocket commands a socket may send: a steady rate per second and a burst.
CHATBRIDGE_WS_RATE = float(os.environ.get("CHATBRIDGE_WS_RATE", "10"))
CHATBRIDGE_WS_BURST = float(os.environ.get("CHATBRIDGE_WS_BURST", "30"))

# MCP at /mcp: an optional bearer token, how long requestState stays valid, how long a
# request notification waits for _respond. Rotate the sealing key with SECRET_KEY_FALLBACKS.
CHATBRIDGE_MCP_TOKEN = os.environ.get("CHATBRIDGE_MCP_TOKEN", "")
CHATBRIDGE_MCP_STATE_TTL = float(os.environ.get("CHATBRIDGE_MCP_STATE_TTL", "900"))
CHATBRIDGE_MCP_REQUEST_TIMEOUT = float(os.environ.get("CHATBRIDGE_MCP_REQUEST_TIMEOUT", "120"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"chatbridge": {"handlers": ["console"], "level": "INFO"}},
}
