"""The demo site's ASGI entry point: ``uvicorn chatbridge.asgi:application --lifespan on``, or
daphne. It is what any project's ``asgi.py`` holds (``docs/install.md``).

The process's runtime (``chatbridge.runtime``) is started by the ASGI lifespan, or under daphne
by its reactor's start-up, and closed on shutdown (SIGTERM drains and exits promptly).
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbridge.settings")

from chatbridge.serving import get_asgi_application  # noqa: E402

application = get_asgi_application()
