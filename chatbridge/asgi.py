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

application = ProtocolTypeRouter(
    {
        "http": http_app,
        # Origin checked against ALLOWED_HOSTS; the session and user identify the owner.
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
