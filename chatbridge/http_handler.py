"""Django's HTTP side: collected static files answered before Django is entered, Django's own
ASGI handler for everything else, and on SQLite every request's synchronous work on the
process's one database thread.

Static files (production): servestatic's ASGI app answers ``STATIC_URL`` paths from
``STATIC_ROOT`` (hashed names cached for good, the gzip copies ``collectstatic`` made) without
a Django request, middleware or thread. The middleware are then all synchronous-capable, and
Django runs such a chain as it does under WSGI when the one at its bottom is synchronous only
(``OneThreadHop``): the whole chain is entered with one thread hop. (Under ASGI Django
otherwise runs each synchronous middleware method in a hop of its own: about twenty a request.)

SQLite has one writer at a time. Django's ASGI handler gives each request a thread of its own,
so a connection of its own: concurrent page loads (each creates a browser session) and the
runtime's writer then wait for each other's locks, and SQLite's busy handler sleeps a
millisecond and more per retry (measured: a burst of 50 page loads spent seconds asleep). On
SQLite a request's thread-sensitive work therefore runs on the thread every other database call
of the process uses (asgiref's ``ThreadSensitiveContext`` with that executor, which Django's own
per-request context then leaves in place); on PostgreSQL requests keep a thread each.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, cast
from wsgiref.headers import Headers

import django
from asgiref.sync import SyncToAsync, ThreadSensitiveContext
from django.core.handlers.asgi import ASGIHandler
from django.db import connections
from django.http import HttpRequest, HttpResponse

from chatbridge.asgi_types import ASGIApp, Receive, Scope, Send

__all__ = ["OneThreadHop", "django_application"]


class OneThreadHop:
    """Last in ``MIDDLEWARE``: synchronous only, so Django runs the middleware above it (all
    synchronous-capable) as one synchronous chain entered with one thread hop."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)


def on_database_thread(app: ASGIApp, executor: Executor | None = None) -> ASGIApp:
    """``app`` with its thread-sensitive work on ``executor`` (one thread): by default the
    process's one database thread, which ``sync_to_async`` uses outside any request."""
    thread = executor or SyncToAsync.single_thread_executor

    async def one_thread(scope: Scope, receive: Receive, send: Send) -> None:
        async with ThreadSensitiveContext(executor=thread):
            await app(scope, receive, send)

    return one_thread


def django_application(*, serve_static: bool, executor: Executor | None = None) -> ASGIApp:
    """Django's ASGI handler (Django set up first); ``serve_static``: collected static files
    from ``STATIC_ROOT`` in front of it, in debug the apps' own files as runserver serves them.
    ``executor``: on SQLite, the one thread to use instead of the process's database thread.
    """
    django.setup(set_prefix=False)
    from django.conf import settings

    app = cast(ASGIApp, ASGIHandler())  # its stubs type a scope as a dict
    if connections["default"].vendor == "sqlite":
        app = on_database_thread(app, executor)
    if serve_static and settings.DEBUG:
        from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

        app = cast(ASGIApp, ASGIStaticFilesHandler(cast(Any, app)))  # as runserver does
    elif serve_static and settings.STATIC_ROOT and Path(settings.STATIC_ROOT).is_dir():
        app = _collected_static_files(app, Path(settings.STATIC_ROOT), settings.STATIC_URL)
    return app


def _collected_static_files(app: ASGIApp, root: Path, url: str) -> ASGIApp:
    from django.contrib.staticfiles.storage import ManifestStaticFilesStorage, staticfiles_storage
    from servestatic import ServeStaticASGI  # type: ignore[import-untyped]

    prefix = "/" + url.lstrip("/") if "://" not in url else None
    if prefix is None:
        return app  # STATIC_URL on another host: that host serves them
    hashed: set[str] = set()
    if isinstance(staticfiles_storage, ManifestStaticFilesStorage):
        hashed = {prefix + name for name in staticfiles_storage.hashed_files.values()}

    def immutable(path: str, url: str) -> bool:
        return url in hashed  # a name with its content's hash: cached for good

    static = ServeStaticASGI(
        app,
        root=root,
        prefix=prefix,
        immutable_file_test=immutable,
        add_headers_function=_security_headers,
    )
    return cast(ASGIApp, static)


def _security_headers(headers: Headers, path: str, url: str) -> None:
    """What Django's SecurityMiddleware adds to every response (static files came through it
    when a middleware served them)."""
    from django.conf import settings

    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.setdefault("X-Content-Type-Options", "nosniff")
    if policy := settings.SECURE_REFERRER_POLICY:
        values = policy.split(",") if isinstance(policy, str) else policy
        headers.setdefault("Referrer-Policy", ",".join(v.strip() for v in values))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.setdefault("Cross-Origin-Opener-Policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY)
