"""Whether this server serves the chat's socket: the chat's page asks when its socket cannot
connect, to tell a person "this server does not serve the chat's connection" rather than
"offline" (``manage.py runserver`` without daphne first in ``INSTALLED_APPS`` serves the
pages through WSGI, and answers the socket's handshake with a 404)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from chatbridge.chat.routing import SOCKETS_SERVED

__all__ = ["connection"]


@login_not_required  # says nothing about anyone
@require_safe
@never_cache
def connection(request: HttpRequest) -> JsonResponse:
    """``{"sockets": true}`` when the request came through ChatBridge's ASGI application
    (``chatbridge.serving.get_asgi_application``), which serves the socket too."""
    scope = getattr(request, "scope", None)  # a WSGI request has none
    return JsonResponse({"sockets": bool(scope and scope.get(SOCKETS_SERVED))})
