"""One drive loop (DESIGN §10): a session is run to its end, or to a pause, by ``drive``, which
reads its events and hands each to a *host*.

A host is whatever carries a tool call to people or clients: the browser chat
(``chatbridge.engine.tool_calls``), a legacy MCP request that pushes its questions or announces
them for ``_respond`` (``chatbridge.mcp.hosts``), a 2026-07-28 round (``chatbridge.mcp.rounds``),
an MCP Task (``chatbridge.mcp.task_views``) and ``chatbridge.testing``. Adding a transport means
writing a host, nothing else. The events are a closed union; a new kind of event is a type
error here until every host has a say in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, assert_never

from chatbridge.author.elicit import ElicitRequest
from chatbridge.calls.events import (
    AbortedEvent,
    CompletedEvent,
    ElicitEvent,
    FailedEvent,
    LogEvent,
    ProgressEvent,
)
from chatbridge.calls.sessions import PluginSession

__all__ = ["EndEvent", "Host", "Pause", "drive"]

R = TypeVar("R")

EndEvent = CompletedEvent | FailedEvent | AbortedEvent


@dataclass(frozen=True)
class Pause(Generic[R]):
    """A host's answer to a question when the drive stops there for now (a 2026-07-28 round
    returns ``value``, its ``input_required``; the next round drives on)."""

    value: R


class Host(Protocol[R]):
    """Where a session's events go; ``R``: what driving it returns."""

    async def question(self, request: ElicitRequest) -> Pause[R] | None:
        """The tool asked ``request``: put it to the person or client (None: drive on once
        it is answered, expired or aborted; ``Pause``: stop driving here, with a value)."""

    async def log(self, event: LogEvent) -> None:
        """A log line of the tool."""

    async def progress(self, event: ProgressEvent) -> None:
        """A progress note of the tool."""

    async def ended(self, event: EndEvent) -> R:
        """The call ended (``session.outcome`` says how); what driving it returns."""


async def drive(session: PluginSession, host: Host[R]) -> R:
    """Run ``session`` on, dispatching its events to ``host``, until it ends or the host
    pauses at a question."""
    while True:
        event = await session.next_event()
        match event:
            case ElicitEvent():
                paused = await host.question(event.request)
                if paused is not None:
                    return paused.value
            case LogEvent():
                await host.log(event)
            case ProgressEvent():
                await host.progress(event)
            case CompletedEvent() | FailedEvent() | AbortedEvent():
                return await host.ended(event)
            case _:
                assert_never(event)
