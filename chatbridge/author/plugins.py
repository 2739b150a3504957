"""Plugins: a tool plus one ``on_elicit`` handler per declared key, and their registry.

A handler answers one question, typically with ``await ctx.render(template, context)``: the
host shows the form, waits for the post-back and validates it (with the key's rules); invalid
posts are shown again with their errors, so a handler only ever sees valid answers. Plugins
decide how a question looks, never what counts as a valid answer: that is the model's.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol

from pydantic import BaseModel
from typing_extensions import TypeVar

from chatbridge.author.elicit import (
    Accept,
    Cancel,
    Decline,
    ElicitAction,
    ElicitId,
    ElicitKey,
    ElicitRequest,
    ElicitResult,
    validate_result,
)
from chatbridge.author.exceptions import ElicitValidationError, PluginDefinitionError
from chatbridge.author.tools import McpTool

__all__ = [
    "UrlPage",
    "UrlQuestion",
    "AnswerDesk",
    "BusinessCheck",
    "ElicitHandler",
    "FormPost",
    "Plugin",
    "PluginBuilder",
    "PluginContext",
    "PluginRegistry",
    "RenderSurface",
    "Submission",
    "TypedHandler",
    "make_plugin",
]


@dataclass(frozen=True)
class UrlQuestion:
    """What a plugin's URL page receives: the question, and how to report its answer.

    ``complete(content)`` validates ``content`` against the key's model (and its rules), marks
    the link used and delivers ``Accept(content)`` to the call wherever it runs; it raises
    ``ElicitValidationError`` for content that does not fit, and ``LinkUsed`` when the link
    was used meanwhile.
    """

    elicit_id: ElicitId
    message: str
    context: dict[str, Any]
    params: dict[str, Any]
    complete: Callable[[BaseModel | Mapping[str, Any]], Awaitable[None]] = field(repr=False)

    @property
    def key(self) -> str:
        return self.elicit_id.key

    @property
    def call_id(self) -> str:
        return self.elicit_id.call_id

    @property
    def tool_name(self) -> str:
        return self.elicit_id.tool_name


# A plugin's page for one URL key: a Django view taking the question as well,
# ``async def page(request: HttpRequest, question: UrlQuestion) -> HttpResponse``.
UrlPage = Callable[[Any, UrlQuestion], Awaitable[Any]]


T = TypeVar("T")
A = TypeVar("A", default=Any)  # the answer model of a handler's key (Any: a string key)
M = TypeVar("M", bound=BaseModel)
FieldErrors = dict[str, list[str]]
Problems = Mapping[str, str | list[str]] | None
BusinessCheck = Callable[[Any], Problems | Awaitable[Problems]]


@dataclass(frozen=True)
class FormPost:
    """What the user sent back for a rendered form."""

    action: ElicitAction
    data: dict[str, Any] = field(default_factory=dict)


class AnswerDesk(Protocol):
    """Where a form's posts are checked: the open question of the call (its session counts and
    reports refused answers), so a post is validated once, by the question that receives it."""

    async def check(self, result: ElicitResult[Any]) -> ElicitResult[Any]:
        """``result`` validated for the question; a refused one is counted, then raised."""

    async def refuse(self, data: dict[str, Any], errors: FieldErrors) -> None:
        """Count a post a form's own check refused (before the model saw it)."""


class _Unattached:
    """The desk of a context no session holds (a plugin tried on its own): it validates
    against the key's model with the question's context, and keeps nothing."""

    def __init__(self, request: ElicitRequest) -> None:
        self._request = request

    async def check(self, result: ElicitResult[Any]) -> ElicitResult[Any]:
        request = self._request
        return validate_result(
            result, request.schema.model, str(request.id), context=request.context
        )

    async def refuse(self, data: dict[str, Any], errors: FieldErrors) -> None:
        return None


class RenderSurface(Protocol):
    """Where a plugin's forms appear (the browser chat implements it)."""

    async def show(
        self, template_name: str, context: dict[str, Any], errors: FieldErrors
    ) -> FormPost:
        """Show the form (with ``errors`` from the previous attempt) and wait for a post."""


@dataclass(frozen=True)
class Submission(Generic[T]):
    """The outcome of ``ctx.render``: the validated result, the raw post and attempts made."""

    result: ElicitResult[T]
    data: dict[str, Any]
    attempts: int


def _normalise(problems: Mapping[str, str | list[str]]) -> FieldErrors:
    return {k: [v] if isinstance(v, str) else list(v) for k, v in problems.items() if v}


class PluginContext(Generic[A]):
    """What an ``on_elicit`` handler receives next to the request (``PluginContext[PickSeat]``
    for a handler registered with ``.on(PICK_SEAT, handler)``: ``render`` then returns a
    ``Submission[PickSeat]``)."""

    def __init__(
        self, request: ElicitRequest[A], surface: RenderSurface, answers: AnswerDesk | None = None
    ) -> None:
        self.request = request
        self._surface = surface
        self.answers: AnswerDesk = answers if answers is not None else _Unattached(request)

    @property
    def call_id(self) -> str:
        return self.request.call_id

    async def render(
        self,
        template_name: str,
        context: Mapping[str, Any] | None = None,
        *,
        validate: BusinessCheck | None = None,
        prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        precheck: Callable[[dict[str, Any]], FieldErrors] | None = None,
    ) -> Submission[A]:
        """Show ``template_name`` until the user sends a valid answer, declines or cancels.

        Each post is validated against the key's model with the question's context, so the
        model's rules (``answer_rule``: a taken seat, a card not dealt) refuse it here exactly
        as on every other transport. ``prepare`` turns the raw post into what the model
        validates (form strings into booleans and lists). ``precheck`` validates the prepared
        data before the model does (a JSON Schema check). The template sees ``request``,
        ``errors`` and ``values`` (the last post) besides ``context``.

        ``validate`` is kept for compatibility only: it gets the validated model and returns
        field errors, but only this chat form runs it, so MCP clients are never held to it.
        Business rules belong in the model (see ``chatbridge.answer_rule``).
        """
        request = self.request
        errors: FieldErrors = {}
        values: dict[str, Any] = {}
        attempts = 0
        while True:
            attempts += 1
            page = {"request": request, "errors": errors, "values": values, **(context or {})}
            post = await self._surface.show(template_name, page, errors)
            if post.action == "decline":
                return Submission(Decline(), post.data, attempts)
            if post.action == "cancel":
                return Submission(Cancel(), post.data, attempts)
            values = post.data
            data = prepare(post.data) if prepare is not None else post.data
            found = precheck(data) if precheck is not None else None
            if found:
                errors = found
                await self.answers.refuse(post.data, errors)
                continue
            try:
                result = await self.answers.check(Accept(data))
            except ElicitValidationError as exc:
                errors = exc.field_errors()
                continue
            if validate is not None:
                problems = validate(result.content)
                if inspect.isawaitable(problems):
                    problems = await problems
                if problems:
                    errors = _normalise(problems)
                    await self.answers.refuse(post.data, errors)
                    continue
            return Submission(result, post.data, attempts)


ElicitHandler = Callable[[ElicitRequest, PluginContext], Awaitable[ElicitResult[Any]]]
# A handler of a typed key: its request, context and answer share the key's model.
TypedHandler = Callable[[ElicitRequest[M], PluginContext[M]], Awaitable[ElicitResult[M]]]


@dataclass(frozen=True)
class Plugin:
    """A tool with a handler (or a URL page) for every key it elicits, and the guest UIs
    it serves."""

    tool: McpTool[Any, Any]
    handlers: Mapping[str, ElicitHandler]
    ui_resources: Mapping[str, str] = field(default_factory=dict)  # ui:// URI → template
    url_pages: Mapping[str, UrlPage] = field(default_factory=dict)  # key → page (a view)

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def mcp(self) -> McpTool[Any, Any]:
        """What an MCP server registers for this plugin (seed 000's ``plugin.mcp``)."""
        return self.tool

    async def handle(self, request: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
        """Run the handler for ``request.key``; what it returns is checked by the question
        (``ctx.answers``: an answer its form checked already is not validated again)."""
        handler = self.handlers.get(request.key)
        if handler is None:
            raise PluginDefinitionError(self.name, extra=(), missing=(request.key,))
        return await ctx.answers.check(await handler(request, ctx))


class PluginBuilder:
    """Returned by ``make_plugin``; ``.on_elicit(...)`` then ``.build()``."""

    def __init__(self, tool: McpTool[Any, Any]) -> None:
        if not isinstance(tool, McpTool):
            raise PluginDefinitionError(
                getattr(tool, "name", repr(tool)),
                detail=f"make_plugin() needs a tool from create_mcp_tool(), got {tool!r}",
            )
        self._tool = tool
        self._handlers: dict[str, ElicitHandler] = {}
        self._ui: dict[str, str] = {}
        self._pages: dict[str, UrlPage] = {}

    def ui_resource(self, uri: str, template_name: str) -> PluginBuilder:
        """Serve ``template_name`` as the guest UI ``uri`` (``ui://name``, seed 004)."""
        name = uri.removeprefix("ui://")
        if not uri.startswith("ui://") or not name or not name.replace("-", "").isalnum():
            raise PluginDefinitionError(
                self._tool.name,
                detail=f"a guest UI URI looks like 'ui://color-picker'; got {uri!r}",
            )
        self._ui[uri] = template_name
        return self

    def on(self, key: ElicitKey[M], handler: TypedHandler[M]) -> PluginBuilder:
        """Register the handler of a typed key: its request, context and answer carry the
        key's model, so a handler written for another key is a type checker's error.
        ``build()`` checks the key is the one the tool declared."""
        if not isinstance(key, ElicitKey):
            raise PluginDefinitionError(
                self._tool.name, detail=f".on() takes an ElicitKey, got {key!r}"
            )
        declared = self._tool.elicits.get(key.name)
        if declared is not None and declared is not key.model:
            raise PluginDefinitionError(
                self._tool.name,
                detail=f"key {key.name!r} is declared with {declared.__name__}, "
                f"but .on() was given a key whose model is {key.model.__name__}",
            )
        return self.on_elicit(**{key.name: handler})

    def on_elicit(self, **handlers: ElicitHandler) -> PluginBuilder:
        """Register handlers by key name (may be called several times)."""
        for key, handler in handlers.items():
            if key in self._handlers:
                raise PluginDefinitionError(self._tool.name, detail=f"two handlers for key {key!r}")
            if not inspect.iscoroutinefunction(handler):
                raise PluginDefinitionError(
                    self._tool.name,
                    detail=f"the handler for {key!r} must be an async function, got {handler!r}",
                )
            self._handlers[key] = handler
        return self

    def on_url_page(self, **pages: UrlPage) -> PluginBuilder:
        """Register the pages of URL questions (``ctx.elicit_url``) by key: Django views,
        ``async def page(request, question: UrlQuestion) -> HttpResponse``, served at the
        question's one-time link; the page calls ``await question.complete(content)`` when
        done. A key with a page needs no ``on_elicit`` handler."""
        for key, page in pages.items():
            if key in self._pages:
                raise PluginDefinitionError(self._tool.name, detail=f"two pages for key {key!r}")
            if not inspect.iscoroutinefunction(page):
                raise PluginDefinitionError(
                    self._tool.name,
                    detail=f"the page for {key!r} must be an async function, got {page!r}",
                )
            self._pages[key] = page
        return self

    def build(self) -> Plugin:
        """Check the handlers and pages cover the declared keys exactly and return the
        ``Plugin``."""
        declared, given = set(self._tool.elicits), set(self._handlers) | set(self._pages)
        if declared != given:
            raise PluginDefinitionError(
                self._tool.name, missing=declared - given, extra=given - declared
            )
        return Plugin(self._tool, dict(self._handlers), dict(self._ui), dict(self._pages))


def make_plugin(tool: McpTool[Any, Any]) -> PluginBuilder:
    """Start deriving a plugin from ``tool``."""
    return PluginBuilder(tool)


class PluginRegistry:
    """Plugins by tool name; duplicates are refused."""

    def __init__(self, plugins: Iterable[Plugin] = ()) -> None:
        self._plugins: dict[str, Plugin] = {}
        for plugin in plugins:
            self.register(plugin)

    def register(self, plugin: Plugin | McpTool[Any, Any]) -> None:
        """Add a plugin (or a ``create_tool`` tool, which carries its own ``.plugin``)."""
        if isinstance(plugin, McpTool) and isinstance(plugin.plugin, Plugin):
            plugin = plugin.plugin
        if not isinstance(plugin, Plugin):
            raise PluginDefinitionError(
                getattr(plugin, "name", repr(plugin)),
                detail=f"register() needs a Plugin from make_plugin(...).build(), got {plugin!r}",
            )
        if plugin.name in self._plugins:
            raise PluginDefinitionError(
                plugin.name, detail="a plugin with this tool name is already registered"
            )
        self._plugins[plugin.name] = plugin

    def get(self, tool_name: str) -> Plugin | None:
        return self._plugins.get(tool_name)

    def has(self, tool_name: str) -> bool:
        return tool_name in self._plugins

    def __iter__(self) -> Iterator[Plugin]:
        return iter(self._plugins.values())

    def __len__(self) -> int:
        return len(self._plugins)

    def __contains__(self, tool_name: object) -> bool:
        return tool_name in self._plugins

    def tools(self) -> list[McpTool[Any, Any]]:
        return [p.tool for p in self._plugins.values()]

    def serving(self, transport: str) -> PluginRegistry:
        """The plugins whose tools are served on ``transport`` (``"chat"`` or ``"mcp"``:
        ``McpToolBuilder.served_on``), as a registry of their own."""
        return PluginRegistry(p for p in self._plugins.values() if transport in p.tool.transports)
