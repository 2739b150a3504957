"""The ASGI application of a project that serves ChatBridge: its Django pages, the chat's
WebSocket, ``/mcp`` and the runtime's start and stop.

In the project's ``asgi.py`` (``docs/install.md``)::

    import os
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
    from chatbridge.serving import get_asgi_application
    application = get_asgi_application()

Serve it with ``uvicorn mysite.asgi:application --lifespan on`` or with daphne (which has no
lifespan: the runtime starts with its reactor instead).
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from chatbridge.asgi_types import ASGIApp, Receive, Scope, Send

__all__ = ["MCP_PATH", "get_asgi_application"]

MCP_PATH = "/mcp"  # the MCP endpoint's path (the chat's socket: chatbridge.chat.routing)

logger = logging.getLogger("chatbridge")
WARM = "litellm loaded: this worker is warm"  # logged once its background import is done


def _import_litellm() -> None:
    """litellm takes seconds to import: do it now, in the background, not in the first chat
    turn. Then freeze what is loaded so far out of the garbage collector's sight: it lives as
    long as the process, and tearing it down at exit took seconds (SIGTERM must be prompt).

    The collector is off while it imports: the import's hundreds of thousands of new objects
    made it run full collections over them every half second, each of 50 to 190 ms, stalling
    every request of those seconds (the MCP benchmark's p99 of 200 ms). What the requests of
    those seconds leave in cycles is collected once it is on again."""
    from chatbridge.llm import litellm_module

    started = time.perf_counter()
    gc.disable()
    try:
        litellm_module()
    finally:
        gc.freeze()
        gc.enable()
    logger.info("%s (%.1f s)", WARM, time.perf_counter() - started)


def get_asgi_application(*, websocket_urlpatterns: Sequence[Any] = ()) -> ASGIApp:
    """Django (with static files when no middleware serves them), the chat's
    WebSocket at ``/ws/chat/<id>/`` (same origin only, the session's user), the MCP endpoint at
    ``/mcp``, and the runtime, started by the ASGI lifespan or daphne's reactor.

    ``websocket_urlpatterns``: the project's own Channels routes, served next to the chat's
    (behind the same origin check and session)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price map
    from django.conf import settings

    from chatbridge.http_handler import django_application

    # Sets Django up: models and consumers import now. Static files unless a middleware of the
    # project serves them.
    django_app = django_application(serve_static=not _static_served(settings.MIDDLEWARE))

    from channels.auth import AuthMiddleware
    from channels.routing import ProtocolTypeRouter, URLRouter
    from channels.sessions import SessionMiddlewareStack
    from django.urls import URLPattern

    from chatbridge.chat.checks import static_files_collected
    from chatbridge.chat.limits import close_oversized_frames_on_daphne
    from chatbridge.chat.routing import SOCKETS_SERVED
    from chatbridge.chat.routing import websocket_urlpatterns as chat_routes
    from chatbridge.conf import setting
    from chatbridge.forwarded import trusted_networks, use_forwarded_client
    from chatbridge.llm.offline import is_offline
    from chatbridge.mcp.resource import METADATA_PATHS
    from chatbridge.origins import SameOriginValidator
    from chatbridge.runtime import ChatBridgeRuntime, current_runtime, daphne_hooks, lifespan

    if not is_offline(setting("CHATBRIDGE_MODEL")):  # the offline model needs no litellm
        threading.Thread(
            target=_import_litellm, name="chatbridge-litellm-import", daemon=True
        ).start()
    for problem in static_files_collected():  # pages would fail: say why, once, at start-up
        logger.error("%s %s", problem.msg, problem.hint)
    trusted_networks(tuple(setting("CHATBRIDGE_TRUSTED_PROXIES")))  # a mistake stops the start

    async def http_router(scope: Scope, receive: Receive, send: Send) -> None:
        """``/mcp`` goes to the MCP server, everything else to Django; behind a trusted proxy,
        with the client's address (``chatbridge.forwarded``)."""
        use_forwarded_client(scope)
        path = scope.get("path", "")
        if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
            await current_runtime().mcp(scope, receive, send)
        elif path in METADATA_PATHS and current_runtime().mcp.resource_server is not None:
            await current_runtime().mcp(scope, receive, send)  # RFC 9728, for OAuth clients
        else:
            scope[SOCKETS_SERVED] = True  # this application serves the chat's socket too
            await django_app(scope, receive, send)

    # The project's routes get the session's user (channels' AuthMiddleware); the chat's
    # socket reads its owner with its conversation itself (``chat.socket_owner``).
    project_routes = [
        URLPattern(route.pattern, AuthMiddleware(route.callback), route.default_args, route.name)
        for route in websocket_urlpatterns
    ]
    router = ProtocolTypeRouter(
        {
            "http": http_router,
            # Origin: the site's own host and port, or CSRF_TRUSTED_ORIGINS; the session (and
            # its user) identify the owner.
            "websocket": SameOriginValidator(
                SessionMiddlewareStack(URLRouter([*chat_routes, *project_routes]))
            ),
        }
    )
    application = lifespan(router, ChatBridgeRuntime.from_settings)
    daphne_hooks(ChatBridgeRuntime.from_settings)  # daphne has no lifespan: its reactor drives it
    close_oversized_frames_on_daphne()  # a close frame (1009), not a dropped connection
    return application


def _static_served(middleware: list[str]) -> bool:
    return any("whitenoise" in name or "servestatic" in name for name in middleware)
