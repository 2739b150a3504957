"""Django settings for ChatBridge.

Embedded default: SQLite, the in-memory channel layer and the offline model, so the app runs
with no network and no key. Scale out with environment variables:

- ``DATABASE_URL``   ``postgres://user:pass@host:5432/name`` (or ``sqlite:///path``)
- ``REDIS_URL``      ``redis://host:6379/0`` selects the ``channels_redis`` layer
- ``CHATBRIDGE_MODEL`` any litellm model string (default ``offline/chatbridge-1``)
- ``DJANGO_DEBUG`` (off unless set), ``DJANGO_SECRET_KEY``, ``DJANGO_ALLOWED_HOSTS``, the TLS
  proxy settings and the ``/mcp`` policy: docs/configuration.md lists them all.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from chatbridge.conf import DEFAULTS
from chatbridge.environment import (
    database_from_url,
    env_flag,
    env_int,
    env_limit,
    env_list,
    load_or_create_secret,
    proxy_ssl_header,
    redis_host,
    sqlite_database,
)

# Before anything can import litellm: never download the model price map.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

BASE_DIR = Path(__file__).resolve().parent.parent
_env = os.environ

# Off unless asked for: debug pages show settings and every route to anyone.
DEBUG = env_flag(_env, "DJANGO_DEBUG", False)

# Never a constant: the key signs sessions and seals MCP requestState. Without
# DJANGO_SECRET_KEY a random key is made once and kept in a file (mode 0600) that every
# process on this machine shares; several machines need the same DJANGO_SECRET_KEY.
SECRET_KEY = _env.get("DJANGO_SECRET_KEY", "").strip() or load_or_create_secret(
    Path(_env.get("DJANGO_SECRET_KEY_FILE") or BASE_DIR / ".secret_key")
)
SECRET_KEY_FALLBACKS = env_list(_env, "DJANGO_SECRET_KEY_FALLBACKS")

ALLOWED_HOSTS = env_list(_env, "DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")

# Behind a TLS-terminating proxy: which header says the request came in over HTTPS, and
# which other origins may post forms (scheme://host[:port]).
SECURE_PROXY_SSL_HEADER = proxy_ssl_header(_env.get("DJANGO_PROXY_SSL_HEADER", ""))
CSRF_TRUSTED_ORIGINS = env_list(_env, "DJANGO_CSRF_TRUSTED_ORIGINS")
# Served over HTTPS only: secure cookies, HTTP redirected, HSTS.
HTTPS = env_flag(_env, "DJANGO_HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
# Django's database sessions, a new one written once (one INSERT, not a read and two writes).
SESSION_ENGINE = "chatbridge.chat.session_store"
SECURE_SSL_REDIRECT = HTTPS and env_flag(_env, "DJANGO_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = env_int(_env, "DJANGO_HSTS_SECONDS", 31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_flag(_env, "DJANGO_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = env_flag(_env, "DJANGO_HSTS_PRELOAD", False)

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
    # First: a request that fails because the database is away gets a 503, never a 500.
    "chatbridge.chat.unavailable.DatabaseUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The page's language from the browser's Accept-Language (or the language cookie); the chat's
    # socket follows the same choice (chatbridge.chat.languages).
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # The chat's pages send ChatBridge's policy (CHATBRIDGE_CSP), the others this site's.
    "csp.middleware.CSPMiddleware",
    # Last: synchronous only, so the chain above runs in one thread hop (chatbridge.http_handler;
    # static files are answered before Django, by chatbridge.serving).
    "chatbridge.http_handler.OneThreadHop",
]
# This site's other pages (the admin, the 404 page) run under the chat's strict policy too.
CONTENT_SECURITY_POLICY = {"DIRECTIVES": DEFAULTS["CHATBRIDGE_CSP"]}

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

_database_url = _env.get("DATABASE_URL")
if _database_url:
    # DATABASE_POOL_SIZE: PostgreSQL connections this process may hold at once;
    # DATABASE_POOL_TIMEOUT: seconds a request waits for one (then it gets a 503).
    DATABASES = {
        "default": database_from_url(
            _database_url,
            pool_size=env_int(_env, "DATABASE_POOL_SIZE", 10),
            pool_timeout=env_int(_env, "DATABASE_POOL_TIMEOUT", 10),
        )
    }
else:
    DATABASES = {"default": sqlite_database(BASE_DIR / "db.sqlite3")}
    # A file, not :memory:, so live-server tests in other threads/processes see the data.
    DATABASES["default"]["TEST"] = {"NAME": BASE_DIR / "test-db.sqlite3"}

_redis_url = os.environ.get("REDIS_URL")
CHANNEL_LAYERS: dict[str, Any] = {
    # What the workers ask each other: Redis pub/sub, one PUBLISH a message, and a message
    # that reaches nobody is a failure its sender rides out (chatbridge.cluster.workers_layer).
    "default": {
        "BACKEND": "chatbridge.cluster.workers_layer.WorkersLayer",
        "CONFIG": {
            # No idle timeout, a pool of 1000, dead pooled connections retried (a restart).
            "hosts": [redis_host(_redis_url)],
            # Separate deployments (or test runs) sharing one Redis keep apart by prefix.
            "prefix": os.environ.get("CHATBRIDGE_REDIS_PREFIX", "asgi"),
        },
    }
    if _redis_url
    else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
}
if _redis_url:
    # A conversation's events, to the other workers that show it, and what each worker shows
    # (chatbridge.cluster.broadcast): one PUBLISH each, nothing kept in Redis.
    CHANNEL_LAYERS["chatbridge-events"] = {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            "hosts": [redis_host(_redis_url)],
            "prefix": os.environ.get("CHATBRIDGE_REDIS_PREFIX", "asgi") + ":events",
        },
    }
# MCP clients that reconnect to another worker find their streams' events in the same Redis.
CHATBRIDGE_MCP_EVENTS_REDIS = _redis_url or ""
CHATBRIDGE_MCP_EVENTS_PREFIX = f"{os.environ.get('CHATBRIDGE_REDIS_PREFIX', 'asgi')}:mcp-events"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en"
# The languages the chat speaks: English and the French it ships (docs/languages.md).
LANGUAGES = [("en", "English"), ("fr", "Français")]
# The framework's catalog also holds the strings of chatbridge/ outside its apps (makemessages
# stores them in the first of these).
LOCALE_PATHS = [BASE_DIR / "chatbridge" / "chat" / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Where `manage.py collectstatic` puts the files the server then serves.
STATIC_ROOT = Path(_env.get("DJANGO_STATIC_ROOT") or BASE_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Production serves what `manage.py collectstatic` gathered, under hashed names that
    # browsers may cache for good; debug serves the apps' files as they are edited.
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "servestatic.storage.CompressedManifestStaticFilesStorage"
    },
}
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
# Refused answers one question takes before the call fails, saying why ("none": no limit).
CHATBRIDGE_MAX_REFUSED_ANSWERS = env_limit(_env, "CHATBRIDGE_MAX_REFUSED_ANSWERS", 5)

# URL questions (ctx.elicit_url): seconds a one-time link stays valid, and the public origin
# links start with (default: the origin of the page or request that started the call).
CHATBRIDGE_URL_LINK_TTL = float(os.environ.get("CHATBRIDGE_URL_LINK_TTL", "900"))
CHATBRIDGE_PUBLIC_URL = os.environ.get("CHATBRIDGE_PUBLIC_URL", "").strip().rstrip("/")

# WebSocket commands a visitor's sockets may send together (a steady rate per second and a
# burst), and those of one client address; sockets a visitor and an address may hold at once.
CHATBRIDGE_WS_RATE = float(os.environ.get("CHATBRIDGE_WS_RATE", "10"))
CHATBRIDGE_WS_BURST = float(os.environ.get("CHATBRIDGE_WS_BURST", "30"))
CHATBRIDGE_WS_RATE_PER_ADDRESS = float(os.environ.get("CHATBRIDGE_WS_RATE_PER_ADDRESS", "50"))
CHATBRIDGE_WS_BURST_PER_ADDRESS = float(os.environ.get("CHATBRIDGE_WS_BURST_PER_ADDRESS", "150"))
CHATBRIDGE_SOCKETS_PER_VISITOR = env_limit(_env, "CHATBRIDGE_SOCKETS_PER_VISITOR", 30)
CHATBRIDGE_SOCKETS_PER_ADDRESS = env_limit(_env, "CHATBRIDGE_SOCKETS_PER_ADDRESS", 200)
# The proxies (addresses or networks, comma-separated) whose X-Forwarded-For names the client.
CHATBRIDGE_TRUSTED_PROXIES = env_list(_env, "CHATBRIDGE_TRUSTED_PROXIES")

# Caps per visitor, and the days ended tool calls are kept (docs/chat.md: Limits); "none": no cap.
CHATBRIDGE_QUEUE_PER_CONVERSATION = env_limit(_env, "CHATBRIDGE_QUEUE_PER_CONVERSATION", 20)
CHATBRIDGE_QUEUE_PER_VISITOR = env_limit(_env, "CHATBRIDGE_QUEUE_PER_VISITOR", 50)
CHATBRIDGE_RUNNING_TURNS_PER_VISITOR = env_limit(_env, "CHATBRIDGE_RUNNING_TURNS_PER_VISITOR", 10)
CHATBRIDGE_QUEUE_PER_ADDRESS = env_limit(_env, "CHATBRIDGE_QUEUE_PER_ADDRESS", 200)
CHATBRIDGE_RUNNING_TURNS_PER_ADDRESS = env_limit(_env, "CHATBRIDGE_RUNNING_TURNS_PER_ADDRESS", 50)
CHATBRIDGE_CONVERSATIONS_PER_HOUR = env_limit(_env, "CHATBRIDGE_CONVERSATIONS_PER_HOUR", 100)
CHATBRIDGE_RETENTION_DAYS = env_limit(_env, "CHATBRIDGE_RETENTION_DAYS", 30)

# MCP at /mcp runs tools with side effects, so who may call it is a decision: a bearer token,
# or a deliberate CHATBRIDGE_MCP_PUBLIC=1 (open by default only in debug). Without either, /mcp
# answers 403 saying so. Also: how long requestState stays valid, how long a request
# notification waits for _respond. Rotate the sealing key with DJANGO_SECRET_KEY_FALLBACKS.
CHATBRIDGE_MCP_TOKEN = os.environ.get("CHATBRIDGE_MCP_TOKEN", "").strip()
CHATBRIDGE_MCP_PUBLIC = env_flag(_env, "CHATBRIDGE_MCP_PUBLIC", DEBUG)
CHATBRIDGE_MCP_STATE_TTL = float(os.environ.get("CHATBRIDGE_MCP_STATE_TTL", "900"))
CHATBRIDGE_MCP_REQUEST_TIMEOUT = float(os.environ.get("CHATBRIDGE_MCP_REQUEST_TIMEOUT", "120"))
# Seconds writes and reads of the runtime wait for a database that went away (a restart).
CHATBRIDGE_DB_RETRY_SECONDS = float(os.environ.get("CHATBRIDGE_DB_RETRY_SECONDS", "30"))
# Seconds between two looks for calls no live worker holds that cannot wait (a payment taken).
CHATBRIDGE_COMMITMENT_SWEEP = float(os.environ.get("CHATBRIDGE_COMMITMENT_SWEEP", "5"))
# Seconds between two reads of answers on record that no message brought (a page paid while
# Redis was down).
CHATBRIDGE_RECHECK_SECONDS = float(os.environ.get("CHATBRIDGE_RECHECK_SECONDS", "5"))
CHATBRIDGE_MCP_SSE_RETRY_MS = env_int(_env, "CHATBRIDGE_MCP_SSE_RETRY_MS", 1000)
# Caps per MCP caller (a user's tokens, or one client address) and idle legacy sessions.
CHATBRIDGE_MCP_MAX_SESSIONS_PER_CALLER = int(
    os.environ.get("CHATBRIDGE_MCP_MAX_SESSIONS_PER_CALLER", "32")
)
CHATBRIDGE_MCP_MAX_CALLS_PER_CALLER = int(
    os.environ.get("CHATBRIDGE_MCP_MAX_CALLS_PER_CALLER", "32")
)
CHATBRIDGE_MCP_SESSION_IDLE = float(os.environ.get("CHATBRIDGE_MCP_SESSION_IDLE", "600"))
# OAuth: the authorization servers (issuer URLs, space-separated) whose tokens /mcp accepts,
# checked by the TokenVerifier at this dotted path; /mcp then publishes RFC 9728 metadata.
CHATBRIDGE_MCP_AUTHORIZATION_SERVERS = os.environ.get(
    "CHATBRIDGE_MCP_AUTHORIZATION_SERVERS", ""
).split()
CHATBRIDGE_MCP_TOKEN_VERIFIER = os.environ.get("CHATBRIDGE_MCP_TOKEN_VERIFIER", "")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)-8s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    # Not propagated: servers (daphne) give the root logger a handler too, which printed
    # every line twice.
    # Django prints a failed request's traceback only with DEBUG on: a server error is logged.
    "loggers": {
        "chatbridge": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}
