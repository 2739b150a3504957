"""chatbridge.http_handler: Django's own ASGI handler, its middleware entered with one thread
hop, and on SQLite every request's SQL on the process's one database thread."""

from __future__ import annotations

import asyncio
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from chatbridge.http_handler import django_application

pytestmark = pytest.mark.django_db(transaction=True)


class CountingThread(ThreadPoolExecutor):
    """One thread that counts the synchronous calls it runs for async code (each a hop from
    the event loop and back), also those handed to it while it waits for the loop."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, initializer=sys.setprofile, initargs=(self._profile,))
        self.calls = 0

    def _profile(self, frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if event == "call" and code.co_name == "thread_handler" and "asgiref" in code.co_filename:
            self.calls += 1


async def get(app: Any, path: str) -> int:
    """The status of ``GET path`` sent to ``app`` as an ASGI server sends it."""
    sent: list[dict[str, Any]] = []
    received = False
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:
            await never.wait()  # the client stays connected
        received = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    await app(scope, receive, send)
    return int(sent[0]["status"])


async def test_a_page_enters_its_middleware_chain_with_one_thread_hop() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("on PostgreSQL each request has a thread of Django's choosing")
    executor = CountingThread()
    try:
        app = django_application(serve_static=False, executor=executor)
        assert await get(app, "/tools/") == 200
    finally:
        executor.shutdown()
    # request_started's receivers, the middleware chain, CSRF's process_view, the view,
    # request_finished's receivers. Without OneThreadHop last in MIDDLEWARE: 19, a hop for
    # each synchronous method of each middleware.
    assert executor.calls == 5


async def test_on_sqlite_a_page_runs_its_sql_on_the_process_database_thread() -> None:
    seen: list[threading.Thread] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(threading.current_thread())
        return execute(sql, params, many, context)

    database_thread = await sync_to_async(threading.current_thread)()
    # On that thread: `connection` is the connection of the thread that reads it.
    await sync_to_async(lambda: connection.execute_wrappers.append(record))()
    try:
        app = django_application(serve_static=False)
        assert await get(app, "/") == 302  # a browser session and a conversation created
    finally:
        await sync_to_async(lambda: connection.execute_wrappers.remove(record))()
    if connection.vendor == "sqlite":
        assert seen and set(seen) == {database_thread}
    else:  # the request's own thread and connection
        assert seen == []
