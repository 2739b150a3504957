"""The language a chat socket speaks: the one its page was drawn in.

``LocaleMiddleware`` chooses a page's language from the language cookie or the browser's
``Accept-Language``; a socket's handshake carries the same two, so the socket chooses the
same way (Django's ``get_language_from_request``) and renders its events in it. A turn started
on the socket (and the tools it calls: their forms and refusals) inherits it, as the language
is active in the socket's task when the turn's task is created.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.http import HttpRequest
from django.http.cookie import parse_cookie
from django.utils import translation

__all__ = ["socket_language"]


def socket_language(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The language for a socket whose handshake sent ``headers`` (ASGI's list of pairs)."""
    request = HttpRequest()
    for name, value in headers:
        if name == b"cookie":
            request.COOKIES = parse_cookie(value.decode("latin-1"))
        elif name == b"accept-language":
            request.META["HTTP_ACCEPT_LANGUAGE"] = value.decode("latin-1")
    return translation.get_language_from_request(request)
