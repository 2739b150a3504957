"""ASGI entry point: ``daphne chatbridge.asgi:application``."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbridge.settings")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

# Django must be set up before anything imports models or consumers.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from chatbridge.chat.routing import websocket_urlpatterns  # noqa: E402

# Plain daphne serves no /static/: let Django do it while developing.
http_app = ASGIStaticFilesHandler(django_asgi_app) if settings.DEBUG else django_asgi_app

import threading  # noqa: E402

from chatbridge.llm import litellm_module  # noqa: E402
from chatbridge.mcp.runtime import get_mcp_endpoint  # noqa: E402

# litellm takes seconds to import: do it now, in the background, not in the first chat turn.
threading.Thread(target=litellm_module, name="chatbridge-litellm-import", daemon=True).start()

mcp_endpoint = get_mcp_endpoint()


async def http_router(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def, type-arg]
    """``/mcp`` goes to the MCP server, everything else to Django."""
    path = scope.get("path", "")
    if path == "/mcp" or path.startswith("/mcp/"):
        await mcp_endpoint(scope, receive, send)
    else:
        await http_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_router,
        # Origin checked against ALLOWED_HOSTS; the session and user identify the owner.
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
