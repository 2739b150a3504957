"""Pages asked for while the database is away: 503 with ``Retry-After``, never a 500.

``DatabaseUnavailableMiddleware`` goes first in ``MIDDLEWARE``. A view that fails because the
database is away (a restart cut its connection off, none could be had within the pool's
timeout) is answered by the middleware's ``process_exception``; a middleware further in that
fails the same way (the session saved after the view) has already been turned into a 500 by
Django, which reports the exception with ``got_request_exception``: the middleware swaps that
500 for the same 503. Browsers get a short page that tries again by itself, API callers
(``Accept: application/json``) a JSON body. A statement that fails on a working connection
(a bug, a missing table) is still a 500.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from django.core.signals import got_request_exception
from django.http import HttpRequest, HttpResponse

from chatbridge.records.outage import RETRY_AFTER, is_outage

__all__ = ["DatabaseUnavailableMiddleware", "unavailable_response"]

logger = logging.getLogger("chatbridge.db")

_MARK = "_chatbridge_database_unavailable"
MESSAGE = "The service is restarting and will be back in a moment; please try again."
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{retry}">
<title>Back in a moment</title></head>
<body><main><h1>Back in a moment</h1><p role="status">{message}</p>
<p>This page tries again by itself in {retry} seconds.</p></main></body></html>
"""


def unavailable_response(request: HttpRequest) -> HttpResponse:
    """503 with ``Retry-After``: a short page, or JSON for a caller that asks for it."""
    if request.get_preferred_type(["text/html", "application/json"]) == "application/json":
        body = {"error": "database_unavailable", "detail": MESSAGE, "retry_after": RETRY_AFTER}
        response = HttpResponse(json.dumps(body), status=503, content_type="application/json")
    else:
        html = PAGE.format(retry=RETRY_AFTER, message=MESSAGE)
        response = HttpResponse(html, status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER)
    response["Cache-Control"] = "no-store"
    response._has_been_logged = True  # type: ignore[attr-defined]  # logged as a warning here
    return response


def _note_exception(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """Django is about to answer 500 for an exception: mark the request if it was an outage
    (run where the exception happened, so its connection is the one to look at)."""
    exc = sys.exc_info()[1]
    if request is not None and exc is not None and is_outage(exc):
        setattr(request, _MARK, exc)


got_request_exception.connect(_note_exception, dispatch_uid="chatbridge-database-unavailable")


class DatabaseUnavailableMiddleware:
    """Turns a request that failed because the database is away into a 503."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        exc = getattr(request, _MARK, None)
        if exc is not None and response.status_code == 500:
            _log(request, exc)
            return unavailable_response(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_outage(exception):
            return None
        _log(request, exception)
        return unavailable_response(request)


def _log(request: HttpRequest, exc: BaseException) -> None:
    logger.warning(
        "%s %s: the database is unavailable (%s: %s); answered 503",
        request.method,
        request.path,
        type(exc).__name__,
        exc,
    )
