"""The process's database writer: writes leave the critical path, in order.

A ``Writer`` is owned by the process's runtime, which starts it and closes it (closing waits
for every queued write). Writes run one after another in a worker thread (through
``sync_to_async``), so their order is kept. Callers that need a write done (the journal entry
that must exist before a tool acts on an answer) await it, which also waits for everything
queued before it; a failed awaited write raises in the caller.

``write_later``/``write_now``/``flush`` reach the writer of the running runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async

__all__ = ["Writer", "WriterNotRunning", "flush", "write_later", "write_now"]

logger = logging.getLogger("chatbridge.writer")

_Job = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[None] | None"]


class WriterNotRunning(RuntimeError):
    """A write was asked for while no runtime's writer runs (start the runtime first)."""


class Writer:
    """An ordered queue of ORM writes and the task that runs them."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done() and not self._closing

    async def start(self) -> None:
        """Start the writer task on the running loop and make it the process's writer."""
        global _active
        if self._task is not None:
            raise RuntimeError("this Writer was started already")
        self._queue = asyncio.Queue()
        self._task = asyncio.create_task(self._work(self._queue), name="chatbridge-db-writer")
        _active = self

    async def aclose(self) -> None:
        """Run every write queued so far, then stop."""
        global _active
        if self._task is None or self._closing:
            return
        self._closing = True
        try:
            await self._enqueue(_nothing, ())
        finally:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            if _active is self:
                _active = None

    def later(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)`` (a sync ORM function); return at once."""
        self._require().put_nowait((fn, args, None))

    async def now(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)`` and wait until it (and every earlier write) is done."""
        await self._enqueue(fn, args)

    async def _enqueue(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._require(closing_ok=True).put_nowait((fn, args, done))
        await done

    def _require(self, *, closing_ok: bool = False) -> asyncio.Queue[_Job]:
        if self._queue is None or self._task is None or self._task.done():
            raise WriterNotRunning("The ChatBridge database writer is not running.")
        if self._closing and not closing_ok:
            raise WriterNotRunning("The ChatBridge database writer is closing.")
        return self._queue

    @staticmethod
    async def _work(queue: asyncio.Queue[_Job]) -> None:
        while True:
            fn, args, done = await queue.get()
            try:
                await sync_to_async(fn)(*args)
            except Exception as exc:
                if done is None:  # nobody waits for it: say so in the log
                    logger.exception("background write %s failed", getattr(fn, "__name__", fn))
                elif not done.done():
                    done.set_exception(exc)
                continue
            if done is not None and not done.done():
                done.set_result(None)


_active: Writer | None = None


def _writer() -> Writer:
    if _active is None:
        raise WriterNotRunning(
            "No ChatBridge runtime is running, so nothing can be written: start one "
            "(the ASGI lifespan, daphne, or ChatBridgeRuntime.start() in a test)."
        )
    return _active


def write_later(fn: Callable[..., Any], *args: Any) -> None:
    """Queue ``fn(*args)`` on the running runtime's writer; return at once."""
    _writer().later(fn, *args)


async def write_now(fn: Callable[..., Any], *args: Any) -> None:
    """Queue ``fn(*args)`` and wait until it (and every earlier write) is done."""
    await _writer().now(fn, *args)


async def flush() -> None:
    """Wait until every write queued so far is done."""
    await write_now(_nothing)


def _nothing() -> None:
    return None
