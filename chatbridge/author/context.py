"""``ToolContext``: what a tool body may call — ``ctx.elicit/sample/log/notify/branch/step``.

This is the author's side of the contract, stated as a protocol; the call runtime implements
it (``chatbridge.calls.context.CallContext``: the rules every host shares, the journal and
replay), so a tool, a handoff or a test double depends on the API, never on the runtime.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol, TypeVar, overload

from pydantic import BaseModel

from chatbridge.author.elicit import ElicitKey, ElicitResult
from chatbridge.author.sampling import SampleResult

__all__ = ["ToolContext"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class ToolContext(Protocol):
    """What a tool body calls; ``depth`` is 0 in the tool, 1+ inside ``ctx.branch``.

    ``scope`` is the branch path (``""`` in the tool body, ``"2.1"`` in the first branch of
    its second branch); each capability call takes the next position in its scope, which
    with the scope identifies it in the journal.
    """

    depth: int
    scope: str

    @property
    def call_id(self) -> str: ...

    @property
    def tool_name(self) -> str: ...

    @property
    def replaying(self) -> bool:
        """True while recorded journal entries remain unconsumed by this run."""
        ...

    @overload
    def elicit(
        self, key: ElicitKey[M], *, message: str, ui: dict[str, Any] | None = None, **context: Any
    ) -> Coroutine[Any, Any, ElicitResult[M]]: ...

    @overload
    def elicit(
        self, key: str, *, message: str, ui: dict[str, Any] | None = None, **context: Any
    ) -> Coroutine[Any, Any, ElicitResult[Any]]: ...

    def elicit(
        self,
        key: ElicitKey[Any] | str,
        *,
        message: str,
        ui: dict[str, Any] | None = None,
        **context: Any,
    ) -> Coroutine[Any, Any, ElicitResult[Any]]:
        """Ask the user for the response declared for ``key``; suspend until answered (await
        it). An unknown key raises here, before anything is sent.

        With a typed key (``ElicitKey``) the answer keeps its type: ``ElicitResult[PickSeat]``.
        """
        ...

    @overload
    def elicit_with(
        self,
        key: ElicitKey[M],
        *,
        message: str,
        context: dict[str, Any],
        ui: dict[str, Any] | None = None,
    ) -> Coroutine[Any, Any, ElicitResult[M]]: ...

    @overload
    def elicit_with(
        self,
        key: str,
        *,
        message: str,
        context: dict[str, Any],
        ui: dict[str, Any] | None = None,
    ) -> Coroutine[Any, Any, ElicitResult[Any]]: ...

    def elicit_with(
        self,
        key: ElicitKey[Any] | str,
        *,
        message: str,
        context: dict[str, Any],
        ui: dict[str, Any] | None = None,
    ) -> Coroutine[Any, Any, ElicitResult[Any]]:
        """``elicit`` with the context as one dict (for keys like ``message`` or ``ui``)."""
        ...

    @overload
    def elicit_url(
        self, key: ElicitKey[M], *, message: str, **context: Any
    ) -> Coroutine[Any, Any, ElicitResult[M]]: ...

    @overload
    def elicit_url(
        self, key: str, *, message: str, **context: Any
    ) -> Coroutine[Any, Any, ElicitResult[Any]]: ...

    def elicit_url(
        self, key: ElicitKey[Any] | str, *, message: str, **context: Any
    ) -> Coroutine[Any, Any, ElicitResult[Any]]:
        """Ask ``key`` on a page of its own (a payment, a credential): the user gets a one-time
        link; the page reports the answer, validated against the key's model like any other.

        Journaled and replayed like ``elicit`` (the link is never recorded). Use it for input
        that must not pass through the chat, the model or an MCP client.
        """
        ...

    async def sample(
        self,
        prompt: str | Sequence[Mapping[str, Any]],
        *,
        system: str | None = None,
        max_tokens: int | None = None,
    ) -> SampleResult:
        """Ask the server-side LLM; allowed in branches."""
        ...

    async def step(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a side effect once and journal its JSON result; replay returns the record.

        Its start is on record before ``fn`` runs. A function with an ``idempotency_key``
        parameter receives the step's key (``step_key``: the same on every run of this step),
        and is run again with it if the call was interrupted after the start and before the
        result was recorded; it must then do its effect at most once per key (as a payment
        provider does). A function without that parameter is never run again in that case:
        ``StepOutcomeUnknown`` is raised in the tool instead (and a committed call
        compensates). A step that raised is noted so and runs again on replay (with its key).

        Live and replayed calls return the same plain JSON value (tuples become lists,
        models become dicts), so the tool behaves identically on both paths.
        """
        ...

    async def log(self, level: str, message: str, **data: Any) -> None:
        """Add a log line to the call's timeline (MCP ``notifications/message``)."""
        ...

    async def notify(
        self, message: str, *, progress: float | None = None, total: float | None = None
    ) -> None:
        """Report progress (MCP ``notifications/progress``)."""
        ...

    def branch(self, fn: Callable[..., Awaitable[T]], *args: Any) -> Coroutine[Any, Any, T]:
        """Run ``fn(branch_ctx, *args)`` as a sub-computation; it may sample, never elicit.

        Use it as ``await ctx.branch(fn, ...)``. The branch's scope is fixed here, when
        ``branch`` is called (source order), not when its coroutine first runs, so
        ``asyncio.gather(ctx.branch(a), ctx.branch(b))`` replays deterministically.
        """
        ...
