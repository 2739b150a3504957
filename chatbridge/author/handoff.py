"""``create_tool``: the isomorphic handoff tool (seed 002) as sugar over ``create_mcp_tool``.

``before(params)`` prepares a context (run as a ``ctx.step``, so a replay sees the same one),
the tool elicits the single key ``__handoff__`` with it, the auto-generated plugin's handler
calls ``client(context, ctx)`` to get the user's answer, and ``after(context, answer)`` shapes
what the model receives. A declined or cancelled handoff gives the model ``{"cancelled": true}``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Generic, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from chatbridge.author.context import ToolContext
from chatbridge.author.elicit import Accept, Cancel, Decline, ElicitRequest, ElicitResult
from chatbridge.author.exceptions import ToolDefinitionError
from chatbridge.author.plugins import PluginContext, Submission, make_plugin
from chatbridge.author.tools import McpTool, McpToolBuilder, NoParams

__all__ = ["HANDOFF_KEY", "HandoffAnswer", "HandoffBuilder", "create_tool"]

HANDOFF_KEY = "__handoff__"
P = TypeVar("P", bound=BaseModel)
P2 = TypeVar("P2", bound=BaseModel)


class HandoffAnswer(BaseModel):
    """Any object: the default answer model of a handoff."""

    model_config = ConfigDict(extra="allow")


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    value = fn(*args)
    return await value if inspect.isawaitable(value) else value


def _as_result(value: Any) -> ElicitResult[Any]:
    if isinstance(value, Submission):
        return value.result
    if isinstance(value, Accept | Decline | Cancel):
        return value
    if isinstance(value, BaseModel):
        return Accept(value)
    if isinstance(value, dict):
        return Accept(value)
    raise TypeError(
        "a handoff client must return ctx.render(...)'s Submission, an ElicitResult or a dict; "
        f"got {type(value).__name__}"
    )


class HandoffBuilder(Generic[P]):
    """Returned by ``create_tool``; finish with ``.handoff(...).build()``."""

    def __init__(self, name: str) -> None:
        self._inner: McpToolBuilder[Any] = McpToolBuilder(name)
        self._name = name
        self._before: Callable[..., Any] | None = None
        self._client: Callable[..., Any] | None = None
        self._after: Callable[..., Any] | None = None
        self._message = ""
        self._answer: type[BaseModel] = HandoffAnswer

    def description(self, text: str) -> HandoffBuilder[P]:
        self._inner.description(text)
        self._message = self._message or text
        return self

    def example(self, *prompts: str) -> HandoffBuilder[P]:
        self._inner.example(*prompts)
        return self

    def parameters(self, model: type[P2]) -> HandoffBuilder[P2]:
        self._inner.parameters(model)
        return cast("HandoffBuilder[P2]", self)

    def needs_approval(self, required: bool = True) -> HandoffBuilder[P]:
        self._inner.needs_approval(required)
        return self

    def handoff(
        self,
        *,
        client: Callable[..., Any],
        before: Callable[..., Any] | None = None,
        after: Callable[..., Any] | None = None,
        message: str | None = None,
        answer: type[BaseModel] | None = None,
    ) -> HandoffBuilder[P]:
        """``before(params)`` → context, ``client(context, ctx)`` → answer, ``after(context,
        answer)`` → what the model gets. ``answer`` validates the answer on every transport
        (default: any object); its rules (``answer_rule``) see the context ``before`` made."""
        if not callable(client):
            raise ToolDefinitionError(f"Tool {self._name!r}: handoff(client=...) must be callable.")
        self._before, self._client, self._after = before, client, after
        if message is not None:
            self._message = message
        if answer is not None:
            self._answer = answer
        return self

    def build(self) -> McpTool[P, Any]:
        """The ``McpTool`` (key ``__handoff__``) with its auto-generated ``.plugin``."""
        client = self._client
        if client is None:
            raise ToolDefinitionError(
                f"Tool {self._name!r} has no .handoff(client=...); create_tool needs one."
            )
        before, after, message = self._before, self._after, self._message or self._name

        async def body(params: BaseModel, ctx: ToolContext) -> Any:
            if before is not None:
                context = await ctx.step("before", _call, before, params)
            else:
                context = params.model_dump(mode="json")
            if not isinstance(context, dict):
                raise TypeError(f"before() must return a dict, got {type(context).__name__}")
            result = await ctx.elicit_with(HANDOFF_KEY, message=message, context=context)
            if not isinstance(result, Accept):
                return {"cancelled": True}
            answer = result.content.model_dump(mode="json")
            return await _call(after, context, answer) if after is not None else answer

        async def handle(request: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
            return _as_result(await _call(client, request.context, ctx))

        tool = self._inner.elicits(**{HANDOFF_KEY: self._answer}).execute(body)
        plugin = make_plugin(tool).on_elicit(**{HANDOFF_KEY: handle}).build()
        built = replace(tool, plugin=plugin)
        object.__setattr__(plugin, "tool", built)  # the plugin serves the tool that names it
        return cast("McpTool[P, Any]", built)


def create_tool(name: str) -> HandoffBuilder[NoParams]:
    """Start defining a handoff tool called ``name`` (see the module docstring)."""
    return HandoffBuilder(name)
