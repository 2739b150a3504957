"""One drive loop (DESIGN §10): a host is all a transport writes. A host made here, in a few
lines, carries a tool's logs, progress, questions and end, and can pause at a question (as a
2026-07-28 round does) and drive on later."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from chatbridge import Accept, SessionManager, create_mcp_tool
from chatbridge.author.elicit import ElicitRequest
from chatbridge.calls.drive import EndEvent, Pause, drive
from chatbridge.calls.events import LogEvent, ProgressEvent
from chatbridge.calls.outcome import Completed


class Name(BaseModel):
    name: str


async def greet(params: Any, ctx: Any) -> str:
    await ctx.log("info", "starting")
    await ctx.notify("asking", progress=1, total=2)
    answer = await ctx.elicit("name", message="Your name?")
    await ctx.notify("greeting", progress=2, total=2)
    return f"Hello, {answer.content.name}"


tool = create_mcp_tool("greet").elicits(name=Name).execute(greet)


class Transcript:
    """A transport of its own: it writes down what the call did and answers as "Ada"."""

    def __init__(self, session: Any, *, pause: bool = False) -> None:
        self.session, self.pause, self.lines = session, pause, list[str]()

    async def question(self, request: ElicitRequest) -> Pause[str] | None:
        self.lines.append(f"asked {request.key}: {request.message}")
        if self.pause:
            return Pause(f"paused at {request.key}")
        await self.session.respond_to_elicit(request.id, Accept({"name": "Ada"}))
        return None

    async def log(self, event: LogEvent) -> None:
        self.lines.append(f"log {event.level}: {event.message}")

    async def progress(self, event: ProgressEvent) -> None:
        self.lines.append(f"progress {event.progress}/{event.total}: {event.message}")

    async def ended(self, event: EndEvent) -> str:
        self.lines.append(f"ended {event.type}")
        outcome = self.session.outcome
        return str(outcome.result) if isinstance(outcome, Completed) else repr(outcome)


async def test_a_host_written_here_carries_a_call_to_its_end(manager: SessionManager) -> None:
    session = await manager.create(tool, {}, call_id="d1")
    host = Transcript(session)
    assert await drive(session, host) == "Hello, Ada"
    assert host.lines == [
        "log info: starting",
        "progress 1/2: asking",
        "asked name: Your name?",
        "progress 2/2: greeting",
        "ended completed",
    ]


async def test_a_host_pauses_at_a_question_and_the_next_drive_goes_on(
    manager: SessionManager,
) -> None:
    session = await manager.create(tool, {}, call_id="d2")
    first = Transcript(session, pause=True)
    assert await drive(session, first) == "paused at name"
    assert session.question is not None  # still open: answered between the two drives
    await session.respond_to_elicit(session.question.id, Accept({"name": "Grace"}))
    second = Transcript(session)
    assert await drive(session, second) == "Hello, Grace"
    assert second.lines == ["progress 2/2: greeting", "ended completed"]
