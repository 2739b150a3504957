"""Django's ASGI handler: the middleware run as one synchronous chain, and on SQLite every
request's synchronous work goes to the process's one database thread.

Under ASGI Django runs each synchronous middleware method in a thread of its own hop (the
project's middleware are synchronous or both; whitenoise is synchronous only, which made the
chain hop to the thread, back to the loop for the middleware below it, and to the thread again
for each of their methods: about twenty hops a request). Here the chain is built as under WSGI
and entered with one hop; an async view is called from it on the event loop.

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
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.db import connections

__all__ = ["ChatBridgeASGIHandler", "get_asgi_application"]


class ChatBridgeASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        self.one_thread = connections["default"].vendor == "sqlite"

    def load_middleware(self, is_async: bool = False) -> None:
        """The synchronous chain (as under WSGI), awaited as one call."""
        super().load_middleware(is_async=False)
        chain: Any = vars(self)["_middleware_chain"]
        self._middleware_chain = sync_to_async(chain, thread_sensitive=True)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self.one_thread and scope["type"] == "http":
            await self.handle(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def get_asgi_application() -> ChatBridgeASGIHandler:
    """``django.core.asgi.get_asgi_application`` with this handler."""
    django.setup(set_prefix=False)
    return ChatBridgeASGIHandler()
