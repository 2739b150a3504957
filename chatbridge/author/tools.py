"""``create_mcp_tool``: declare a tool's parameters, elicitation surface and body once."""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, overload

from pydantic import BaseModel, ConfigDict, ValidationError

from chatbridge.author.elicit import KEY_NAME, ElicitKey
from chatbridge.author.exceptions import InvalidToolParams, ToolDefinitionError
from chatbridge.author.exits import DEFAULT_CANCEL, DEFAULT_DECLINE, Exit, QuestionExits
from chatbridge.author.human import NUL_TECHNICAL
from chatbridge.author.storable import nul_at

if TYPE_CHECKING:
    from chatbridge.author.context import ToolContext

__all__ = ["TRANSPORTS", "McpTool", "McpToolBuilder", "NoParams", "ToolHints", "create_mcp_tool"]

P = TypeVar("P", bound=BaseModel)
P2 = TypeVar("P2", bound=BaseModel)
R = TypeVar("R")
M = TypeVar("M", bound=BaseModel)
M_in = TypeVar("M_in", bound=BaseModel, contravariant=True)


class KeyedCompensation(Protocol[M_in]):
    """A compensation that takes its step's idempotency key (``ctx.step`` passes it)."""

    def __call__(self, answer: M_in, /, *, idempotency_key: str) -> Any: ...


ToolFn = Callable[[P, "ToolContext"], Awaitable[R]]

# The committing answer (its model), and its step's idempotency_key if it takes one → a JSON result
Compensate = Callable[..., Any]


@dataclass(frozen=True)
class Commitment:
    """A declared commitment: ``key``'s accepted answer commits the call; ``compensate(answer)``
    undoes it (a refund) when the call cannot finish. ``label`` names it for people."""

    key: str
    compensate: Compensate | None = None
    label: str = ""

    @property
    def what(self) -> str:
        return self.label or f"the {self.key.replace('_', ' ')}"


# Where a tool can be served: the browser chat and the MCP server (``.served_on()``).
TRANSPORTS = ("chat", "mcp")

# OpenAI-style function names: what every LLM provider and MCP client accepts.
_TOOL_NAME = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")


class NoParams(BaseModel):
    """Parameters of a tool that takes none."""

    model_config = ConfigDict(extra="forbid")


def _check_model(tool: str, what: str, model: object) -> type[BaseModel]:
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ToolDefinitionError(
            f"Tool {tool!r}: {what} must be a pydantic BaseModel subclass, got {model!r}."
        )
    return model


@dataclass(frozen=True)
class ToolHints:
    """What a tool does to the world, for clients deciding whether to confirm a call (MCP tool
    ``annotations``). ``None`` leaves a hint unsaid."""

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None

    def declared(self) -> dict[str, bool]:
        """The hints that are said, by name."""
        return {k: v for k, v in vars(self).items() if v is not None}


@functools.cache
def _schema_text(model: type[BaseModel]) -> str:
    return json.dumps(model.model_json_schema())


@dataclass(frozen=True)
class McpTool(Generic[P, R]):
    """A tool: name, description, parameters model, elicitation surface and async body."""

    name: str
    description: str
    parameters_model: type[P]
    elicits: Mapping[str, type[BaseModel]]
    fn: ToolFn[P, R] = field(repr=False)
    needs_approval: bool = False
    plugin: Any = field(default=None, repr=False, compare=False)  # set by create_tool
    hints: ToolHints = field(default_factory=ToolHints)
    examples: tuple[str, ...] = ()  # prompts a person might send to use it (the chat offers them)
    # Answers that commit a call (a payment), by key: see ``chatbridge.calls.commitment``.
    commitments: Mapping[str, Commitment] = field(default_factory=dict)
    # Where it is served (``TRANSPORTS``): both, unless ``.served_on()`` says otherwise.
    transports: frozenset[str] = frozenset(TRANSPORTS)
    # What its questions offer besides an answer, by key (``.exits()``).
    exits: Mapping[str, QuestionExits] = field(default_factory=dict)
    # The result field that says whether the tool did its job (``.done_when``; "" for none).
    done_field: str = ""

    @property
    def parameters_schema(self) -> dict[str, Any]:
        """JSON Schema of the parameters (what the LLM and MCP clients are shown); a fresh
        copy each time, drawn once per model (every turn lists every tool)."""
        return cast(dict[str, Any], json.loads(_schema_text(self.parameters_model)))

    def elicit_schema(self, key: str) -> dict[str, Any]:
        """JSON Schema of the response model for ``key`` (a fresh copy)."""
        return cast(dict[str, Any], json.loads(_schema_text(self.elicits[key])))

    def function_spec(self) -> dict[str, Any]:
        """The tool in the OpenAI/litellm ``tools=[...]`` format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters_schema,
            },
        }

    def validate_params(self, params: Mapping[str, Any] | BaseModel) -> P:
        """Validate raw arguments into the parameters model, or raise ``InvalidToolParams``."""
        raw = params.model_dump() if isinstance(params, BaseModel) else params
        if not isinstance(raw, Mapping):
            errors = [{"loc": (), "msg": f"expected an object, got {type(raw).__name__}"}]
            raise InvalidToolParams(self.name, errors)
        where = nul_at(raw)
        if where is not None:  # no database stores it alike (PostgreSQL refuses it)
            raise InvalidToolParams(self.name, [{"loc": where, "msg": NUL_TECHNICAL}])
        try:
            return self.parameters_model.model_validate(dict(raw))
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            raise InvalidToolParams(self.name, cast(Any, errors)) from None

    async def run(self, params: Mapping[str, Any] | BaseModel, ctx: ToolContext) -> R:
        """Validate ``params`` and run the tool body with ``ctx``."""
        return await self.fn(self.validate_params(params), ctx)


class McpToolBuilder(Generic[P]):
    """Fluent builder returned by ``create_mcp_tool``; ``.execute()`` finishes it."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise ToolDefinitionError(
                f"Tool name {name!r} is not valid: use 1-64 letters, digits, '_' or '-'."
            )
        self._name = name
        self._description = ""
        self._parameters: type[BaseModel] = NoParams
        self._elicits: dict[str, type[BaseModel]] | None = None
        self._needs_approval = False
        self._hints = ToolHints()
        self._examples: tuple[str, ...] = ()
        self._commitments: dict[str, Commitment] = {}
        self._exits: dict[str, QuestionExits] = {}
        self._transports = frozenset(TRANSPORTS)
        self._done_field = ""

    def description(self, text: str) -> McpToolBuilder[P]:
        """What the tool does, as the LLM will read it."""
        self._description = text
        return self

    def example(self, *prompts: str) -> McpToolBuilder[P]:
        """Prompts a person might send to use the tool ("Book a flight from JFK to LAX"); an
        empty chat offers them as buttons."""
        self._examples += tuple(prompts)
        return self

    def parameters(self, model: type[P2]) -> McpToolBuilder[P2]:
        """The pydantic model of the tool's arguments."""
        self._parameters = _check_model(self._name, ".parameters()", model)
        return cast("McpToolBuilder[P2]", self)

    def needs_approval(self, required: bool = True) -> McpToolBuilder[P]:
        """Ask the user to approve each call before the tool runs, on every transport.

        Unless ``.hints()`` says otherwise, such a tool is declared not read-only and
        destructive, so MCP clients that confirm such tools confirm it too.
        """
        self._needs_approval = required
        return self

    def done_when(self, field: str) -> McpToolBuilder[P]:
        """Name the result field that says whether the tool did its job: a call whose result
        has it false (``{"booked": false, "reason": "payment declined"}``) ended as not done,
        and the chat's card says "Not done" (with the result's ``reason``) instead of "Done".
        Without it, a tool that returns has done its job; ChatBridge never guesses from a
        result's fields."""
        if not isinstance(field, str) or not field.isidentifier():
            raise ToolDefinitionError(
                f"Tool {self._name!r}: .done_when() takes the name of a result field, "
                f"got {field!r}."
            )
        self._done_field = field
        return self

    def served_on(self, *transports: str) -> McpToolBuilder[P]:
        """Where the tool is served: ``"chat"`` (the browser chat offers it to its model),
        ``"mcp"`` (MCP clients list and call it), or both (the default). A tool whose answers
        an MCP form cannot carry is served in the chat only either way, with a system-check
        warning; ``.served_on("chat")`` says so, and silences it."""
        unknown = [t for t in transports if t not in TRANSPORTS]
        if not transports or unknown:
            given = ", ".join(map(repr, transports)) or "none"
            raise ToolDefinitionError(
                f"Tool {self._name!r}: .served_on() takes one or more of "
                f"{', '.join(map(repr, TRANSPORTS))}, got {given}."
            )
        self._transports = frozenset(transports)
        return self

    def hints(
        self,
        *,
        read_only: bool | None = None,
        destructive: bool | None = None,
        idempotent: bool | None = None,
        open_world: bool | None = None,
    ) -> McpToolBuilder[P]:
        """Declare what the tool does to the world (MCP tool ``annotations``)."""
        self._hints = ToolHints(read_only, destructive, idempotent, open_world)
        return self

    def elicits(self, *keys: ElicitKey[Any], **surface: type[BaseModel]) -> McpToolBuilder[P]:
        """Declare every key the tool may elicit with its response model (may be empty):
        typed keys (``ElicitKey("pick_seat", PickSeat)``, whose answers keep their type) and/or
        ``name=Model``."""
        declared: dict[str, type[BaseModel]] = {}
        for key in keys:
            if not isinstance(key, ElicitKey):
                raise ToolDefinitionError(
                    f"Tool {self._name!r}: .elicits() takes ElicitKey objects and name=Model "
                    f"pairs, got {key!r}."
                )
            declared[key.name] = key.model
        for key_name, model in surface.items():
            if not KEY_NAME.match(key_name):
                raise ToolDefinitionError(
                    f"Tool {self._name!r}: elicitation key {key_name!r} must be snake_case "
                    "(lowercase letters, digits, '_')."
                )
            if key_name in declared:
                raise ToolDefinitionError(
                    f"Tool {self._name!r}: elicitation key {key_name!r} is declared twice."
                )
            declared[key_name] = _check_model(
                self._name, f"the response model of {key_name!r}", model
            )
        self._elicits = declared
        return self

    @overload
    def commits(
        self,
        key: ElicitKey[M],
        *,
        compensate: Callable[[M], Any] | KeyedCompensation[M] | None = None,
        label: str = "",
    ) -> McpToolBuilder[P]: ...

    @overload
    def commits(
        self, key: str, *, compensate: Compensate | None = None, label: str = ""
    ) -> McpToolBuilder[P]: ...

    def commits(
        self,
        key: ElicitKey[Any] | str,
        *,
        compensate: Compensate | None = None,
        label: str = "",
    ) -> McpToolBuilder[P]:
        """An accepted answer to ``key`` commits the call (a payment): from then on no abort
        ends it silently. The tool finishes what it committed to; where it cannot (it fails,
        or is stopped at a later question), ``compensate(answer)`` runs once, as a journaled
        step (a refund; like any step it receives ``idempotency_key`` if it takes one), and
        the call ends saying so. ``label`` names it for people ("the
        payment"). The key must be declared in ``.elicits()``."""
        name = key.name if isinstance(key, ElicitKey) else key
        if compensate is not None and not callable(compensate):
            raise ToolDefinitionError(
                f"Tool {self._name!r}: compensate= of {name!r} must be a function, got "
                f"{compensate!r}."
            )
        self._commitments[name] = Commitment(name, compensate, label)
        return self

    def exits(
        self,
        key: ElicitKey[Any] | str,
        *,
        change: Mapping[ElicitKey[Any] | str, Any] | None = None,
        decline: Exit | None = DEFAULT_DECLINE,
        cancel: Exit | None = DEFAULT_CANCEL,
    ) -> McpToolBuilder[P]:
        """Name what question ``key`` offers besides an answer (``chatbridge.author.exits``):
        the earlier answers it offers to change, with their labels (``{PICK_SEAT: "Change
        seat"}``; ``{}`` offers none; by default every earlier answer), and its Decline and
        Cancel buttons in words saying what they do here (``None`` leaves one out)."""
        name = key.name if isinstance(key, ElicitKey) else key
        for given, value in (("decline", decline), ("cancel", cancel)):
            if value is not None and not isinstance(value, Exit):
                raise ToolDefinitionError(
                    f"Tool {self._name!r}: {given}= of {name!r} must be an Exit or None, "
                    f"got {value!r}."
                )
        labels = None
        if change is not None:
            labels = {(k.name if isinstance(k, ElicitKey) else k): v for k, v in change.items()}
        self._exits[name] = QuestionExits(labels, decline, cancel)
        return self

    def execute(self, fn: ToolFn[P, R]) -> McpTool[P, R]:
        """Attach the async body and return the finished ``McpTool``."""
        if self._elicits is None:
            raise ToolDefinitionError(
                f"Tool {self._name!r} has no .elicits(...) declaration; it is required, "
                "use .elicits() when the tool asks nothing."
            )
        if not inspect.iscoroutinefunction(fn):
            raise ToolDefinitionError(
                f"Tool {self._name!r}: .execute() needs an async function (async def), got {fn!r}."
            )
        undeclared = sorted(set(self._commitments) - set(self._elicits))
        if undeclared:
            raise ToolDefinitionError(
                f"Tool {self._name!r} commits on {', '.join(map(repr, undeclared))}, which it "
                f"does not elicit; declared keys: {', '.join(sorted(self._elicits)) or '(none)'}."
                " Add it to .elicits()."
            )
        named = set(self._exits).union(*(e.change or {} for e in self._exits.values()))
        unknown = sorted(named - set(self._elicits))
        if unknown:
            raise ToolDefinitionError(
                f"Tool {self._name!r} names exits of {', '.join(map(repr, unknown))}, which it "
                f"does not elicit; declared keys: {', '.join(sorted(self._elicits)) or '(none)'}."
            )
        return McpTool(
            name=self._name,
            description=self._description,
            parameters_model=cast("type[P]", self._parameters),
            elicits=dict(self._elicits),
            fn=fn,
            needs_approval=self._needs_approval,
            hints=self._effective_hints(),
            examples=self._examples,
            commitments=dict(self._commitments),
            transports=self._transports,
            exits=dict(self._exits),
            done_field=self._done_field,
        )

    def _effective_hints(self) -> ToolHints:
        hints = self._hints
        if not self._needs_approval:
            return hints
        return ToolHints(
            read_only=False if hints.read_only is None else hints.read_only,
            destructive=True if hints.destructive is None else hints.destructive,
            idempotent=hints.idempotent,
            open_world=hints.open_world,
        )


def create_mcp_tool(name: str) -> McpToolBuilder[NoParams]:
    """Start defining a tool called ``name``."""
    return McpToolBuilder(name)
