"""Django's ASGI handler, with every request's synchronous work on the process's one database
thread when the database is SQLite.

Django gives each HTTP request its own thread for its synchronous parts (middleware, views, the
ORM) and so its own database connection. SQLite has one writer at a time: concurrent page loads
(each creates a browser session) and the runtime's writer then wait for each other's locks, and
SQLite's busy handler sleeps a millisecond and more per retry (measured here: a burst of 50 page
loads spent seconds asleep in it). On SQLite the requests share the thread every other database
call of the process uses instead; on PostgreSQL they keep their own (its connections work side
by side).
"""

from __future__ import annotations

from typing import Any

import django
from django.core.handlers.asgi import ASGIHandler
from django.db import connections

__all__ = ["ChatBridgeASGIHandler", "get_asgi_application"]


class ChatBridgeASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        self.one_thread = connections["default"].vendor == "sqlite"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self.one_thread and scope["type"] == "http":
            await self.handle(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def get_asgi_application() -> ChatBridgeASGIHandler:
    """``django.core.asgi.get_asgi_application`` with this handler."""
    django.setup(set_prefix=False)
    return ChatBridgeASGIHandler()
