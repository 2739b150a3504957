"""The live side of a tool call, as ``CallContext`` sees it: the ``CapabilityHost`` protocol.

``CallContext`` (``context.py``) owns the rules every host shares and calls a host only for
the live work: asking the user, running a completion, publishing log lines and progress, and
making each capability result durable. ``PluginSession`` is the host today; whichever transport
carries its questions (the chat, an MCP client) sits behind it.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from chatbridge.author.elicit import ElicitRequest, ElicitResult
from chatbridge.author.sampling import SampleRequest, SampleResult
from chatbridge.calls.journal import EntryKind, JournalEntry

__all__ = ["LOG_LEVELS", "CapabilityHost", "LogLevel"]

LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
LOG_LEVELS: tuple[str, ...] = LogLevel.__args__  # type: ignore[attr-defined]


class CapabilityHost(Protocol):
    """The live side of a tool call: where questions, completions and events go."""

    async def ask(self, request: ElicitRequest) -> ElicitResult[Any]:
        """Put ``request`` to the user; return a result already validated for its key."""

    def open_question(self) -> str | None:
        """The id of the question waiting for an answer, if any (one at a time)."""

    async def complete(self, request: SampleRequest) -> SampleResult:
        """Run an LLM completion."""

    async def emit_log(self, level: str, message: str, data: dict[str, Any]) -> None:
        """Publish a log line."""

    async def emit_progress(
        self, message: str, progress: float | None, total: float | None
    ) -> None:
        """Publish a progress note."""

    async def requested(self, seq: int, kind: EntryKind, key: str, request: dict[str, Any]) -> None:
        """A live question or completion starts."""

    async def step_started(self, entry: JournalEntry, request: dict[str, Any]) -> None:
        """A step starts: its start made durable (``entry``, its result empty) before its side
        effect runs; raising keeps the effect from running (and stops the call)."""

    async def recorded(self, entry: JournalEntry) -> None:
        """Make a capability result durable; raising stops the call (the tool never sees it)."""
