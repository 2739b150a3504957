"""The capability context a tool receives: ``CallContext``, the runtime's ``ToolContext``.

``CallContext`` implements the author's protocol (``chatbridge.author.context.ToolContext``,
where each method is documented) and owns the rules every host shares (declared keys, one
pending question, no questions in branches, validation, the journal and replay); a
``CapabilityHost`` (``capability_host.py``) does the live work: a ``PluginSession`` asks a
browser or an MCP client. ``CallState`` is what one call's root context and its branch
contexts share: the tool, its parameters, its host and journal, and whether the call was
aborted or stopped.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from chatbridge.author.approval import APPROVAL_KEY, Approval, approval_message
from chatbridge.author.elicit import (
    ElicitId,
    ElicitKey,
    ElicitMode,
    ElicitRequest,
    ElicitResult,
    result_from_dict,
    result_to_dict,
    validate_result,
)
from chatbridge.author.exceptions import (
    ChatBridgeError,
    ElicitAlreadyPending,
    ElicitInBranch,
    SessionAborted,
    StepOutcomeUnknown,
    ToolDefinitionError,
    UnknownElicitKey,
)
from chatbridge.author.sampling import SampleRequest, SampleResult
from chatbridge.author.tools import McpTool
from chatbridge.calls.capability_host import LOG_LEVELS, CapabilityHost, LogLevel
from chatbridge.calls.journal import (
    RAISED,
    Journal,
    JournalEntry,
    json_value_and_text,
    request_digest,
    step_key,
    to_json_value,
)

__all__ = ["LOG_LEVELS", "CallContext", "CallState", "CapabilityHost", "LogLevel"]

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


class CallContext:
    """One call's ``ToolContext`` (the tool body's, ``depth`` 0, or a branch's: ``depth`` 1+ and
    its ``scope``, the branch path), each capability call at the next position of its scope."""

    __slots__ = ("_branches", "_positions", "_state", "depth", "scope")  # one per call

    def __init__(self, state: CallState, depth: int = 0, scope: str = "") -> None:
        self._state = state
        self.depth = depth
        self.scope = scope
        self._positions = 0
        self._branches = 0

    def _next_pos(self) -> int:
        self._positions += 1
        return self._positions

    @property
    def call_id(self) -> str:
        return self._state.call_id

    @property
    def tool_name(self) -> str:
        return self._state.tool.name

    @property
    def replaying(self) -> bool:
        """True while recorded journal entries remain unconsumed by this run."""
        return self._state.journal.replaying

    # ``elicit``, ``elicit_with`` and ``elicit_url`` hand back ``_ask``'s coroutine rather than
    # awaiting it in one of their own: a suspended call keeps one frame less per layer (about
    # 300 bytes each, measured by bench/memory.py).

    def elicit(
        self,
        key: ElicitKey[Any] | str,
        *,
        message: str,
        ui: dict[str, Any] | None = None,
        **context: Any,
    ) -> Coroutine[Any, Any, ElicitResult[Any]]:
        """``ToolContext.elicit``: the declared key's question."""
        name, model = self._declared(key)
        return self._ask(name, model, message, context, ui)

    def elicit_with(
        self,
        key: ElicitKey[Any] | str,
        *,
        message: str,
        context: dict[str, Any],
        ui: dict[str, Any] | None = None,
    ) -> Coroutine[Any, Any, ElicitResult[Any]]:
        """``ToolContext.elicit_with``: ``elicit`` with the context as one dict."""
        name, model = self._declared(key)
        return self._ask(name, model, message, context, ui)

    def elicit_url(
        self, key: ElicitKey[Any] | str, *, message: str, **context: Any
    ) -> Coroutine[Any, Any, ElicitResult[Any]]:
        """``ToolContext.elicit_url``: the key asked on a page of its own."""
        name, model = self._declared(key)
        return self._ask(name, model, message, context, None, mode="url")

    def _declared(self, key: ElicitKey[Any] | str) -> tuple[str, type[BaseModel]]:
        """The name and model the tool declared for ``key``; raised before anything is sent
        when it declared none (``UnknownElicitKey``) or another model under that name."""
        tool = self._state.tool
        name = key.name if isinstance(key, ElicitKey) else key
        model: type[BaseModel] | None = tool.elicits.get(name)
        if model is None:
            self._state.check_aborted()
            raise UnknownElicitKey(tool.name, name, tool.elicits)
        if isinstance(key, ElicitKey) and key.model is not model:
            raise ToolDefinitionError(
                f"Tool {tool.name!r} declared {name!r} with the answer model "
                f"{model.__name__}, but elicited it with a key whose model is "
                f"{key.model.__name__}; declare that key object itself in .elicits(...)."
            )
        return name, model

    async def ask_approval(self) -> ElicitResult[Approval]:
        """The call's approval question (tools declared with ``.needs_approval()``), asked by
        the session before the tool body runs; journaled like any answer."""
        state = self._state
        message = approval_message(state.tool.name, state.params)
        context = {"tool": state.tool.name, "arguments": state.params}
        return await self._ask(APPROVAL_KEY, Approval, message, context, None)

    async def _ask(
        self,
        key: str,
        model: type[BaseModel],
        message: str,
        context: dict[str, Any],
        ui: dict[str, Any] | None,
        mode: ElicitMode = "form",
    ) -> ElicitResult[Any]:
        state = self._state
        state.check_aborted()
        if self.depth > 0:
            raise ElicitInBranch(state.tool.name, key, self.depth)
        pending = state.host.open_question()
        if pending is not None:
            raise ElicitAlreadyPending(state.tool.name, key, pending)
        plain_context = to_json_value(context, f"The context of elicitation {key!r}")
        plain_ui = None if ui is None else to_json_value(ui, f"The ui of elicitation {key!r}")
        pos = self._next_pos()
        state.elicit_seq += 1
        asked: dict[str, Any] = {"key": key, "message": message, "context": plain_context}
        if mode != "form":  # form questions keep the digests they were recorded with
            asked["mode"] = mode
        digest = request_digest(asked)
        entry = state.journal.recorded(self.scope, pos, "elicit", key, digest)
        number = state.journal.question_number(state.elicit_seq, entry.seq if entry else None)
        elicit_id = ElicitId(state.tool.name, key, state.call_id, number)
        if entry is not None:
            return state.answered(
                key,
                validate_result(
                    result_from_dict(entry.result), model, str(elicit_id), context=plain_context
                ),
            )
        request = ElicitRequest.build(
            elicit_id, model, message, plain_context, state.params, plain_ui, mode
        )
        seq = state.journal.next_seq(question=True)
        await state.host.requested(seq, "elicit", key, request.to_dict())
        # The host's question validated the answer (the key's model, with its context).
        try:  # shield_abort, inline: one frame less while the call waits
            result = await state.host.ask(request)
        except asyncio.CancelledError as cancelled:
            raise state.aborted_instead(cancelled) from None
        state.answered(key, result)
        await state.record(
            JournalEntry(seq, "elicit", key, result_to_dict(result), self.scope, pos, digest)
        )
        return result

    async def sample(
        self,
        prompt: str | Sequence[Mapping[str, Any]],
        *,
        system: str | None = None,
        max_tokens: int | None = None,
    ) -> SampleResult:
        """Ask the server-side LLM; allowed in branches."""
        state = self._state
        state.check_aborted()
        request = SampleRequest.build(prompt, system, max_tokens)
        pos = self._next_pos()
        # The system prompt is the first of ``messages``: the digest covers it.
        wire = {"messages": request.messages, "max_tokens": request.max_tokens}
        digest = request_digest(wire)
        entry = state.journal.recorded(self.scope, pos, "sample", "sample", digest)
        if entry is not None:
            return SampleResult.from_dict(entry.result)
        seq = state.journal.next_seq()
        await state.host.requested(seq, "sample", "sample", wire)
        result = await state.shield_abort(state.host.complete(request))
        await state.record(
            JournalEntry(seq, "sample", "sample", result.to_dict(), self.scope, pos, digest)
        )
        return result

    async def step(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``ToolContext.step``: its start on record before ``fn`` runs, then its result."""
        state = self._state
        state.check_aborted()
        pos = self._next_pos()
        digest = request_digest({"name": name, "args": args})
        journal = state.journal
        entry = journal.recorded(self.scope, pos, "step", name, digest)
        if entry is not None:
            return entry.result["value"]
        keyed = _takes_key(fn)
        start = journal.started(self.scope, pos, name, digest)
        if start is None:
            start = JournalEntry(journal.next_seq(), "step", name, {}, self.scope, pos, digest)
        elif not keyed and RAISED not in start.result:
            # An interrupted run started it: whether it happened is unknown.
            raise StepOutcomeUnknown(state.tool.name, name, step_key(state.call_id, start.seq))
        seq = start.seq
        # On record before the side effect (again, for a step run again by its key: the
        # lease's fence). The host may refuse (this worker lost the call): it never runs.
        request = {"args": to_jsonable_python(args, fallback=repr)}
        await state.guarded(state.host.step_started(start, request))
        kwargs = {"idempotency_key": step_key(state.call_id, seq)} if keyed else {}
        try:
            if inspect.iscoroutinefunction(fn):
                raw = await state.shield_abort(fn(*args, **kwargs))
            else:
                raw = await state.shield_abort(asyncio.to_thread(fn, *args, **kwargs))
                if inspect.isawaitable(raw):
                    raw = await state.shield_abort(raw)
        except SessionAborted:  # stopped while it ran: whether it happened is unknown
            raise
        except Exception as exc:  # it raised: run again on replay (as it was not recorded)
            await state.record_raised(start, exc)
            raise
        value, text = json_value_and_text(raw, f"The result of step {name!r}")
        await state.record_step(
            JournalEntry(
                seq, "step", name, {"value": value}, self.scope, pos, digest, f'{{"value": {text}}}'
            )
        )
        return value

    async def log(self, level: str, message: str, **data: Any) -> None:
        """Add a log line to the call's timeline (MCP ``notifications/message``)."""
        self._state.check_aborted()
        if level not in LOG_LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}; got {level!r}")
        plain = to_json_value(data, "Log data")
        if not self._state.journal.replaying:
            await self._state.host.emit_log(level, message, plain)

    async def notify(
        self, message: str, *, progress: float | None = None, total: float | None = None
    ) -> None:
        """Report progress (MCP ``notifications/progress``)."""
        self._state.check_aborted()
        for name, value in (("progress", progress), ("total", total)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
        if not self._state.journal.replaying:
            await self._state.host.emit_progress(message, progress, total)

    def branch(self, fn: Callable[..., Awaitable[T]], *args: Any) -> Coroutine[Any, Any, T]:
        """``ToolContext.branch``: the branch's scope fixed now, in source order."""
        self._branches += 1
        scope = f"{self.scope}.{self._branches}" if self.scope else str(self._branches)
        return self._run_branch(CallContext(self._state, self.depth + 1, scope), fn, args)

    async def _run_branch(
        self, child: CallContext, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]
    ) -> T:
        self._state.check_aborted()
        return await fn(child, *args)


def _takes_key(fn: Callable[..., Any]) -> bool:
    """Does step function ``fn`` take the step's ``idempotency_key`` (by name)?"""
    try:
        parameter = inspect.signature(fn).parameters.get("idempotency_key")
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return parameter is not None and parameter.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )
