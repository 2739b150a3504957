"""The project's ASGI app served by uvicorn inside the test's own event loop, on a real socket.

The test's database (pytest-django, ``transaction=True``) is the one the server reads, so a test
can create users and MCP tokens and see what calls left on record. The socket listens before the
server starts: a client that connects at once waits in the backlog, it is never refused.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn

from chatbridge.serving import get_asgi_application


@asynccontextmanager
async def mcp_site() -> AsyncIterator[str]:
    """The app (its runtime started by the lifespan, from the current settings): its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        get_asgi_application(),
        lifespan="on",
        log_level="warning",
        timeout_graceful_shutdown=3,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
