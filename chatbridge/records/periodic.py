"""A runtime's background job on a clock: the sweeps of committed calls, parked MCP calls and
ended calls past retention. Each pass that fails is logged and the next one tried (the database
may be back by then); the owner starts it with the runtime and closes it with it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from chatbridge.records.outage import DatabaseUnavailable

__all__ = ["Periodic"]

logger = logging.getLogger("chatbridge")


class Periodic:
    """Run ``job`` ``delay`` seconds after ``start()``, then every ``every`` seconds, until
    ``aclose()``; ``passed`` is set after each pass. ``what`` names it in the log."""

    def __init__(
        self,
        name: str,
        job: Callable[[], Awaitable[object]],
        *,
        every: float,
        what: str,
        delay: float = 0.0,
    ) -> None:
        self.name, self.job, self.every, self.what, self.delay = name, job, every, what, delay
        self.passed = asyncio.Event()  # for tests and operators
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        await asyncio.sleep(self.delay)
        while True:
            try:
                await self.job()
            except DatabaseUnavailable as exc:  # away past its retries: try again later
                logger.warning("%s failed: %s", self.what, exc)
            except Exception:
                logger.exception("%s failed", self.what)
            self.passed.set()
            await asyncio.sleep(self.every)
