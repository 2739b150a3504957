"""Testing a tool without a browser or an MCP client: ``run_tool`` runs it through the real
runtime (a ``SessionManager``, journal, validation, the offline model for ``ctx.sample``) and
answers its questions from a script::

    run = await run_tool(book, {"origin": "JFK", "destination": "LAX"},
                         answers={PICK_FLIGHT: {"flight_id": "UA1"}, PICK_SEAT: Decline()})
    assert run.result == {"booked": False, ...}
    assert run.asked == ["pick_flight", "pick_seat"]

An answer is a dict or a model instance (accepted), ``Accept(...)``, ``Decline()``, ``Cancel()``,
or a function of the ``ElicitRequest`` (sync or async) returning one of those; a list of
answers answers a key asked again (or refused: the model's refusal is recorded and the next
answer given; after as many refused answers as a question takes, five, the call fails with
``TooManyRefusedAnswers``). A question nobody scripted, or an answer the model refuses with no
answer left, fails the test with what was asked and what happened before. Imports no web
framework.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from chatbridge.author.approval import APPROVAL_KEY
from chatbridge.author.elicit import Accept, Cancel, Decline, ElicitKey, ElicitRequest
from chatbridge.author.exceptions import (
    ChatBridgeError,
    ElicitValidationError,
    TooManyRefusedAnswers,
)
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.author.tools import McpTool
from chatbridge.calls.drive import EndEvent, Pause, drive
from chatbridge.calls.events import CompletedEvent, FailedEvent, LogEvent, ProgressEvent
from chatbridge.calls.manager import SessionManager
from chatbridge.calls.outcome import Outcome
from chatbridge.llm import is_offline, litellm_module

__all__ = ["ToolRun", "UnexpectedQuestion", "run_tool"]

OFFLINE_MODEL = "offline/chatbridge-1"
Answer = Mapping[str, Any] | BaseModel | Accept[Any] | Decline | Cancel | Callable[..., Any]


class UnexpectedQuestion(ChatBridgeError, AssertionError):
    """The tool asked something the script has no (more) answers for."""


@dataclass
class ToolRun:
    """How a scripted call went: its end, what it asked, logged and reported."""

    status: str = "running"  # completed, failed or aborted
    result: Any = None
    error: str | None = None
    questions: list[ElicitRequest] = field(default_factory=list)
    refused: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)
    logs: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    progress: list[tuple[str, float | None, float | None]] = field(default_factory=list)
    outcome: Outcome | None = None  # how it ended, as every reader takes it (calls.outcome)

    @property
    def asked(self) -> list[str]:
        """The keys of the questions, in the order asked (a refused answer asks again)."""
        return [q.key for q in self.questions]

    def story(self) -> str:
        """What happened so far, in lines, for failure messages."""
        lines = [f"asked {q.key!r}: {q.message}" for q in self.questions]
        lines += [f"refused {key!r}: {errors}" for key, errors in self.refused]
        return "\n".join(lines) or "(nothing asked yet)"


def _scripts(
    answers: Mapping[str | ElicitKey[Any], Answer | Sequence[Answer]],
) -> dict[str, list[Answer]]:
    scripts: dict[str, list[Answer]] = {}
    for key, given in answers.items():
        name = key.name if isinstance(key, ElicitKey) else key
        many = isinstance(given, Sequence) and not isinstance(given, str | bytes)
        scripts[name] = list(given) if many else [given]  # type: ignore[arg-type, list-item]
    return scripts


async def _answer(script: Answer, request: ElicitRequest) -> Accept[Any] | Decline | Cancel:
    if callable(script) and not isinstance(script, BaseModel):
        script = script(request)
        if inspect.isawaitable(script):
            script = await script
    if isinstance(script, Accept | Decline | Cancel):
        return script
    if isinstance(script, BaseModel | Mapping):
        return Accept(script if isinstance(script, BaseModel) else dict(script))
    raise TypeError(
        f"an answer to {request.key!r} must be a dict, a model, Accept, Decline or "
        f"Cancel (or a function returning one), got {script!r}"
    )


async def run_tool(
    tool: McpTool[Any, Any],
    params: Mapping[str, Any] | BaseModel | None = None,
    *,
    answers: Mapping[str | ElicitKey[Any], Answer | Sequence[Answer]] | None = None,
    approve: bool = True,
    model: str = OFFLINE_MODEL,
    timeout: float = 10.0,
) -> ToolRun:
    """Run ``tool`` with ``params`` to its end, answering its questions from ``answers`` (by
    key or typed key); a tool declared ``.needs_approval()`` is approved (or, with
    ``approve=False``, denied). ``timeout`` bounds each wait for the tool's next event."""
    scripts = _scripts(answers or {})
    if tool.needs_approval:
        scripts.setdefault(APPROVAL_KEY, [{"approve": approve}])
    run = ToolRun()
    # litellm (for any model but the offline one) is imported on a process's first sample:
    # seconds (4 here, more on a loaded machine), the process's, not the tool's. Paid before
    # ``timeout`` counts.
    if not is_offline(model):
        litellm_module(model)
    manager = SessionManager(sampler=LiteLLMSampler(model), idle_timeout=None)
    session = await manager.create(tool, params if params is not None else {}, call_id="test-call")
    try:
        async with asyncio.timeout(timeout) as deadline:
            return await drive(session, _ScriptHost(session, scripts, run, deadline, timeout))
    finally:
        await manager.shutdown("the test ended")


class _ScriptHost:
    """The script as a ``Host`` (``chatbridge.calls.drive``): it answers each question from
    its list and keeps what the tool logged and reported; each event restarts ``timeout``."""

    def __init__(
        self,
        session: Any,
        scripts: dict[str, list[Answer]],
        run: ToolRun,
        deadline: asyncio.Timeout,
        timeout: float,
    ) -> None:
        self.session, self.scripts, self.run = session, scripts, run
        self.deadline, self.timeout = deadline, timeout

    def _heard(self) -> None:
        self.deadline.reschedule(asyncio.get_running_loop().time() + self.timeout)

    async def question(self, request: ElicitRequest) -> Pause[ToolRun] | None:
        self._heard()
        self.run.questions.append(request)
        await _respond(self.session, request, self.scripts, self.run)
        return None

    async def log(self, event: LogEvent) -> None:
        self._heard()
        self.run.logs.append((event.level, event.message, event.data))

    async def progress(self, event: ProgressEvent) -> None:
        self._heard()
        self.run.progress.append((event.message, event.progress, event.total))

    async def ended(self, event: EndEvent) -> ToolRun:
        run = self.run
        run.status = event.type
        run.outcome = self.session.outcome
        if isinstance(event, CompletedEvent):
            run.result = event.result
        else:
            run.error = event.error if isinstance(event, FailedEvent) else event.reason
        return run


async def _respond(
    session: Any, request: ElicitRequest, scripts: dict[str, list[Answer]], run: ToolRun
) -> None:
    while True:
        left = scripts.get(request.key)
        if not left:
            await session.abort("the test has no answer for this question")
            said = "no answer" if request.key not in scripts else "no answer left"
            raise UnexpectedQuestion(
                f"The tool asked {request.key!r} ({request.message!r}) and the test has "
                f"{said} for it.\n{run.story()}"
            )
        result = await _answer(left.pop(0), request)
        try:
            await session.respond_to_elicit(request.id, result)
            return
        except TooManyRefusedAnswers as closed:  # the last one the question takes: it failed
            run.refused.append((request.key, closed.errors))
            return
        except ElicitValidationError as exc:
            run.refused.append((request.key, exc.field_errors()))
