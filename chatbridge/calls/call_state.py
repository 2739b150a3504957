"""What one tool call's root context and its branch contexts share: ``CallState`` (the
tool, its parameters, its host and journal, and whether the call was aborted or stopped).
``CallContext`` (``context.py``) keeps one and asks its host through it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from chatbridge.author.elicit import ElicitResult
from chatbridge.author.exceptions import ChatBridgeError, SessionAborted
from chatbridge.author.tools import McpTool
from chatbridge.calls.capability_host import CapabilityHost
from chatbridge.calls.journal import RAISED, Journal, JournalEntry

__all__ = ["CallState"]

T = TypeVar("T")


class CallState:
    """State of one tool call shared by its root context and every branch context."""

    # One per suspended call: slots, not a dict (bench/memory.py).
    __slots__ = (
        "aborted",
        "call_id",
        "elicit_seq",
        "host",
        "journal",
        "on_answer",
        "params",
        "stopped",
        "tool",
        "unsettled",
    )

    def __init__(
        self,
        tool: McpTool[Any, Any],
        call_id: str,
        params: Mapping[str, Any],
        host: CapabilityHost,
        journal: Journal,
    ) -> None:
        self.tool, self.call_id, self.host, self.journal = tool, call_id, host, journal
        self.params = params if isinstance(params, dict) else dict(params)  # the session's own
        self.elicit_seq = 0
        self.aborted: SessionAborted | None = None
        # Set when the call must not go on (its journal could not be written): every later
        # capability call raises it, whatever the tool caught.
        self.stopped: ChatBridgeError | None = None
        # Set when a step ran and its result could not be recorded: its effect may stand, so
        # the call is handed over to be finished by replay (with the step's key), not failed.
        self.unsettled = False
        # Told every answer the tool receives, live or replayed (commitments watch for theirs).
        self.on_answer: Callable[[str, ElicitResult[Any]], object] | None = None

    def answered(self, key: str, result: ElicitResult[Any]) -> ElicitResult[Any]:
        if self.on_answer is not None:
            self.on_answer(key, result)
        return result

    def check_aborted(self) -> None:
        if self.aborted is not None:
            raise self.aborted
        if self.stopped is not None:
            raise self.stopped

    async def guarded(self, awaitable: Awaitable[T]) -> T:
        """Await a host's bookkeeping; its ``ChatBridgeError`` stops the call for good."""
        try:
            return await awaitable
        except ChatBridgeError as exc:
            self.stopped = self.stopped or exc
            raise

    async def record(self, entry: JournalEntry) -> None:
        """Hand ``entry`` to the host to make durable, then keep it; a failure stops the call."""
        await self.guarded(self.host.recorded(entry))
        self.journal.add(entry)

    async def record_step(self, entry: JournalEntry) -> None:
        """``record`` a step's result; a failure leaves the step unsettled (its effect may
        stand, and only a run with its key may settle it)."""
        try:
            await self.record(entry)
        except ChatBridgeError:
            self.unsettled = True
            raise

    async def record_raised(self, start: JournalEntry, exc: Exception) -> None:
        """A step's function raised: noted on its start (``RAISED``), so a replay runs it
        again rather than taking it for interrupted. A failed write stops the call as any
        journal write does (the step counts as interrupted then)."""
        text = f"{type(exc).__name__}: {exc}"[:500]
        noted = JournalEntry(
            start.seq, "step", start.key, {RAISED: text}, start.scope, start.pos, start.digest
        )
        try:
            await self.guarded(self.host.recorded(noted))
        except ChatBridgeError:
            return  # ``stopped`` is set: the call goes no further
        self.journal.note_raised(noted)

    async def shield_abort(self, awaitable: Awaitable[T]) -> T:
        """Await, turning the cancellation that ``abort()`` causes into ``SessionAborted``."""
        try:
            return await awaitable
        except asyncio.CancelledError as cancelled:
            raise self.aborted_instead(cancelled) from None

    def aborted_instead(self, cancelled: asyncio.CancelledError) -> BaseException:
        """What to raise for the cancellation ``cancelled`` just caught: ``SessionAborted``
        if ``abort()`` caused it (the task's cancellation taken back), else ``cancelled``."""
        task = asyncio.current_task()
        if self.aborted is None or task is None:
            return cancelled
        task.uncancel()
        return self.aborted
