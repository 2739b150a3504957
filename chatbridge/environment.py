"""Settings read from the environment: flags, lists, the database URL, the secret key.

Kept apart from ``settings.py`` so each rule has one place and a test of its own. Nothing here
imports Django's configured settings; everything is a pure function of its arguments (and, for
the secret key, of one file).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "database_from_url",
    "redis_host",
    "env_flag",
    "env_int",
    "env_list",
    "load_or_create_secret",
    "proxy_ssl_header",
    "sqlite_database",
]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def env_flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """A yes/no variable; anything but the usual spellings is an error, not a silent no."""
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a flag; use 1 or 0.")


def env_int(env: Mapping[str, str], name: str, default: int) -> int:
    """A whole-number variable."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number.") from None


def env_limit(env: Mapping[str, str], name: str, default: int | None) -> int | None:
    """A cap: a whole number, or ``none`` for no cap."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() == "none":
        return None
    value = env_int(env, name, 0)
    if value < 0:
        raise ImproperlyConfigured(f"{name}={raw!r} must be 0 or more, or none for no limit.")
    return value


def env_list(env: Mapping[str, str], name: str, default: str = "") -> list[str]:
    """A comma-separated variable as a list, blanks dropped."""
    return [item.strip() for item in env.get(name, default).split(",") if item.strip()]


def proxy_ssl_header(raw: str) -> tuple[str, str] | None:
    """``SECURE_PROXY_SSL_HEADER`` from ``X-Forwarded-Proto`` or ``X-Forwarded-Proto=https``.

    The proxy must set (and strip from clients) that header; Django then trusts it to say the
    original request was HTTPS.
    """
    raw = raw.strip()
    if not raw:
        return None
    header, _, value = raw.partition("=")
    header = header.strip()
    if not header or not all(c.isalnum() or c == "-" for c in header):
        raise ImproperlyConfigured(
            f"DJANGO_PROXY_SSL_HEADER={raw!r} is not a header name; "
            "use e.g. X-Forwarded-Proto (or X-Forwarded-Proto=https)."
        )
    return "HTTP_" + header.upper().replace("-", "_"), value.strip() or "https"


def database_from_url(url: str, *, pool_size: int = 10, pool_timeout: int = 10) -> dict[str, Any]:
    """A ``DATABASES`` entry from a ``postgres://`` or ``sqlite:///`` URL."""
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql", "pgsql"):
        return {
            "ENGINE": "chatbridge.records.postgresql",
            "NAME": unquote(parts.path.lstrip("/")) or "postgres",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            # Under ASGI every concurrently served request runs in a thread of its own, and a
            # persistent connection per thread piles up; a pool bounds them per process and
            # makes the others wait their turn instead of failing with "too many clients".
            "CONN_MAX_AGE": 0,
            # The pool checks a connection before handing it out (one it kept may have been
            # cut off since: a restart ends them all; it is replaced instead of failing a
            # request): at most once a second (``chatbridge.records.pool_check``, which this
            # ENGINE puts in place of Django's check on every checkout).
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": {
                "pool": {
                    "min_size": 1,
                    "max_size": pool_size,
                    # How long a request waits for a connection: the pool is busy, or the
                    # database is away (restarting); then the request gets a 503.
                    "timeout": pool_timeout,
                }
            },
        }
    if parts.scheme == "sqlite":
        name = unquote(parts.path)[1:] if parts.path.startswith("//") else unquote(parts.path)
        return sqlite_database(name or ":memory:")
    raise ImproperlyConfigured(
        f"DATABASE_URL scheme {parts.scheme!r} is not supported; use postgres:// or sqlite:///"
    )


def redis_host(url: str, *, max_connections: int = 1000) -> dict[str, Any]:
    """A channels_redis host entry (``CHANNEL_LAYERS[...]["CONFIG"]["hosts"]``) for ``url``.

    No idle timeout (redis-py 8 drops idle connections after about 5 s otherwise), a pool that
    takes bursts (redis-py caps it at 100 and errors instead of waiting), and a command that
    meets a dead pooled connection retried on a fresh one: after Redis restarts, every
    connection a worker pooled is dead, and without a retry (channels_redis's pools have none)
    the first message each one carries fails.
    """
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff

    return {
        "address": url,
        "socket_timeout": None,
        "max_connections": max_connections,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
    }


def sqlite_database(name: str | Path) -> dict[str, Any]:
    """SQLite set up for several writers: WAL, a busy timeout, write locks taken up front."""
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": name,
        # Kept open: a process's database calls share one thread (see chatbridge.http_handler),
        # and closing a WAL database's connection after every request checkpointed and reopened
        # it (measured: 2–3 ms, three times per booking).
        "CONN_MAX_AGE": None,
        "OPTIONS": {
            # WAL: readers do not wait for the writer; NORMAL: no fsync on every commit.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            # A transaction that reads and then writes cannot wait for the lock once it has
            # read (SQLite answers "database is locked" at once); IMMEDIATE takes the write
            # lock at BEGIN, where the busy timeout applies.
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        },
    }


def load_or_create_secret(path: Path) -> str:
    """The secret stored at ``path``, created (random, mode 0600) on first use.

    Several processes may start at once: the first to publish its file wins (a hard link
    cannot replace an existing file) and the others read it.
    """
    with contextlib.suppress(FileNotFoundError):
        return _read_secret(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(48) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(draft, path)
    finally:
        draft.unlink(missing_ok=True)
    return _read_secret(path)


def _read_secret(path: Path) -> str:
    secret = path.read_text().strip()
    if len(secret) < 32:
        raise ImproperlyConfigured(
            f"The secret key in {path} is too short ({len(secret)} characters); "
            "delete the file to have a new one made, or set DJANGO_SECRET_KEY."
        )
    return secret
