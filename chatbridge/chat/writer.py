"""One background writer per process: database writes leave the critical path, in order.

Writes are queued and run one after another in a worker thread (through ``sync_to_async``),
so their order is kept. Callers that need a write done (the journal entry that must exist
before a tool acts on an answer) await it, which also waits for everything queued before it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async

__all__ = ["flush", "write_later", "write_now"]

logger = logging.getLogger("chatbridge.writer")

_queues: dict[
    asyncio.AbstractEventLoop,
    asyncio.Queue[tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[None] | None]],
] = {}
_workers: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}


async def _work(
    queue: asyncio.Queue[tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[None] | None]],
) -> None:
    while True:
        fn, args, done = await queue.get()
        try:
            await sync_to_async(fn)(*args)
        except Exception as exc:  # a failed write is logged; the chat goes on
            logger.exception("background write %s failed", getattr(fn, "__name__", fn))
            if done is not None and not done.done():
                done.set_exception(exc)
                continue
        if done is not None and not done.done():
            done.set_result(None)


def _queue() -> asyncio.Queue[
    tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[None] | None]
]:
    loop = asyncio.get_running_loop()
    queue = _queues.get(loop)
    worker = _workers.get(loop)
    if queue is None or worker is None or worker.done():
        queue = _queues[loop] = asyncio.Queue()
        _workers[loop] = loop.create_task(_work(queue), name="chatbridge-db-writer")
    return queue


def write_later(fn: Callable[..., Any], *args: Any) -> None:
    """Queue ``fn(*args)`` (a sync ORM function); return at once."""
    _queue().put_nowait((fn, args, None))


async def write_now(fn: Callable[..., Any], *args: Any) -> None:
    """Queue ``fn(*args)`` and wait until it (and every earlier write) is done."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    _queue().put_nowait((fn, args, done))
    await done


async def flush() -> None:
    """Wait until every write queued so far is done."""
    await write_now(_nothing)


def _nothing() -> None:
    return None
