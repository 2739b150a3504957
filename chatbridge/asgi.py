"""ASGI entry point: ``uvicorn chatbridge.asgi:application --lifespan on``, or daphne.

The process's runtime (``chatbridge.runtime``) is started by the ASGI lifespan, or under daphne
by its reactor's start-up, and closed on shutdown (SIGTERM drains and exits promptly).
"""

from __future__ import annotations

import gc
import logging
import os
import threading

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbridge.settings")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from chatbridge.http_handler import get_asgi_application  # noqa: E402

# Django must be set up before anything imports models or consumers.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from chatbridge.chat.checks import static_files_collected  # noqa: E402
from chatbridge.chat.origins import SameOriginValidator  # noqa: E402
from chatbridge.chat.routing import websocket_urlpatterns  # noqa: E402
from chatbridge.llm import litellm_module  # noqa: E402
from chatbridge.runtime import ChatBridgeRuntime, current_runtime, daphne_hooks, lifespan  # noqa: E402


def _import_litellm() -> None:
    """litellm takes seconds to import: do it now, in the background, not in the first chat
    turn. Then freeze what is loaded so far out of the garbage collector's sight: it lives as
    long as the process, and tearing it down at exit took seconds (SIGTERM must be prompt)."""
    litellm_module()
    gc.freeze()


threading.Thread(target=_import_litellm, name="chatbridge-litellm-import", daemon=True).start()

for problem in static_files_collected():  # pages would fail: say why, once, at start-up
    logging.getLogger("chatbridge").error("%s %s", problem.msg, problem.hint)


async def http_router(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def, type-arg]
    """``/mcp`` goes to the MCP server, everything else to Django."""
    path = scope.get("path", "")
    if path == "/mcp" or path.startswith("/mcp/"):
        await current_runtime().mcp(scope, receive, send)
    else:
        await django_asgi_app(scope, receive, send)  # static files too (whitenoise)


router = ProtocolTypeRouter(
    {
        "http": http_router,
        # Origin: the site's own host and port, or CSRF_TRUSTED_ORIGINS; the session and user
        # identify the owner.
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
application = lifespan(router, ChatBridgeRuntime.from_settings)
daphne_hooks(ChatBridgeRuntime.from_settings)  # daphne has no lifespan: its reactor drives it
