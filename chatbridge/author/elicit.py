"""Elicitation values: structured ids, requests and the ``ElicitResult`` union, and the rules of
an answer: business checks that travel with a key's model to every transport.

A key's model says what shape an answer has; its *rules* say which answers count (the card
must be on the table, the seat must be free). Rules read the question's context, which every
place an answer enters passes to pydantic (``model.model_validate(data, context=...)``), so the
chat, MCP push, MCP ``input_required`` and ``_respond`` refuse the same answers with the same
message and ask again::

    class PickedCard(BaseModel):
        card: str

        @answer_rule("card")
        def _dealt(cls, card: str, context: Mapping[str, Any]) -> None:
            if card not in {c["code"] for c in context["cards"]}:
                raise AnswerRefused("Pick one of the cards on the table.")

A rule runs only when there is a question (schema generation and a model used on its own skip
it), after the field's own validation. A rule that needs other fields takes a fourth argument,
``answer``: the fields declared (and validated) before its own.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias, cast

from pydantic import BaseModel, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError
from typing_extensions import TypeVar

from chatbridge.author.exceptions import ElicitValidationError, ToolDefinitionError
from chatbridge.author.exits import NO_DECLARED_EXITS, Change, QuestionExits
from chatbridge.author.human import NUL_KIND, NUL_TECHNICAL, pydantic_messages
from chatbridge.author.model_context import encode_message, with_context
from chatbridge.author.storable import nul_at

__all__ = [
    "Accept",
    "AnswerRefused",
    "Cancel",
    "Decline",
    "ElicitAction",
    "ElicitId",
    "ElicitKey",
    "ElicitMode",
    "ElicitRequest",
    "ElicitResult",
    "ElicitSchema",
    "RuleCheck",
    "answer_rule",
    "result_from_dict",
    "result_to_dict",
    "validate_result",
]

T = TypeVar("T")
# A request's or a plugin context's answer type; unsaid, it is Any (string keys).
A = TypeVar("A", default=Any)
M = TypeVar("M", bound=BaseModel)
ElicitAction = Literal["accept", "decline", "cancel"]
ElicitMode = Literal["form", "url"]


KEY_NAME = re.compile(r"\A[a-z_][a-z0-9_]*\Z")


@dataclass(frozen=True)
class ElicitKey(Generic[M]):
    """A question a tool may ask, with the model of its answer: declare it once, then use it
    for ``.elicits(KEY)``, ``ctx.elicit(KEY, ...)`` and ``make_plugin(tool).on(KEY, handler)``.

    The answer type flows from the key: ``await ctx.elicit(PICK_SEAT, ...)`` is an
    ``ElicitResult[PickSeat]``, so a misspelled key (an unknown name) or a misspelled field of
    the answer is a type checker's error, not a runtime surprise. String keys still work; their
    answers are typed ``Any``.
    """

    name: str
    model: type[M]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not KEY_NAME.match(self.name):
            raise ToolDefinitionError(
                f"Elicitation key {self.name!r} must be snake_case (lowercase letters, digits, "
                "'_')."
            )
        if not (isinstance(self.model, type) and issubclass(self.model, BaseModel)):
            raise ToolDefinitionError(
                f"Elicitation key {self.name!r}: the answer model must be a pydantic BaseModel "
                f"subclass, got {self.model!r}."
            )

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Accept(Generic[T]):
    """The user submitted a response (a model instance once validated, a dict before)."""

    content: T
    action: Literal["accept"] = "accept"

    @property
    def accepted(self) -> Literal[True]:
        return True


@dataclass(frozen=True)
class Decline:
    """The user explicitly declined to answer."""

    action: Literal["decline"] = "decline"

    @property
    def accepted(self) -> Literal[False]:
        return False

    @property
    def content(self) -> None:
        return None


@dataclass(frozen=True)
class Cancel:
    """The user dismissed the question, or nobody could answer it."""

    action: Literal["cancel"] = "cancel"

    @property
    def accepted(self) -> Literal[False]:
        return False

    @property
    def content(self) -> None:
        return None


ElicitResult: TypeAlias = Accept[T] | Decline | Cancel


def result_to_dict(result: ElicitResult[Any]) -> dict[str, Any]:
    """JSON form of a result: ``{"action": ..., "content": ...}`` (content only on accept)."""
    if isinstance(result, Accept):
        content = result.content
        if isinstance(content, BaseModel):
            content = content.model_dump(mode="json")
        return {"action": "accept", "content": content}
    return {"action": result.action}


def result_from_dict(data: Mapping[str, Any]) -> ElicitResult[Any]:
    """Parse the JSON form of a result (content stays a dict until validated)."""
    action = data.get("action")
    if action == "accept":
        content = data.get("content")
        if content is None:
            content = {}
        if not isinstance(content, Mapping):
            raise ValueError(f"accept content must be an object, got {type(content).__name__}")
        return Accept(dict(content))
    if action == "decline":
        return Decline()
    if action == "cancel":
        return Cancel()
    raise ValueError(f"action must be one of 'accept', 'decline', 'cancel'; got {action!r}")


def validate_result(
    result: ElicitResult[Any],
    model: type[BaseModel],
    elicit_id: str,
    *,
    context: Mapping[str, Any] | None = None,
) -> ElicitResult[Any]:
    """Return ``result`` with accepted content validated into ``model``.

    ``context`` is the question's context (``ElicitRequest.context``): pydantic hands it to
    the model's validators as ``info.context``, so the key's rules (``answer_rule``) run; without
    it they are skipped. Raises ``ElicitValidationError`` (carrying pydantic's errors) when the
    content does not fit.
    """
    if not isinstance(result, Accept):
        if isinstance(result, Decline | Cancel):
            return result
        raise TypeError(
            f"an elicitation handler must return Accept(...), Decline() or Cancel(); "
            f"got {type(result).__name__}"
        )
    content = result.content
    if isinstance(content, BaseModel):  # re-validate: model_construct() skips validation
        content = content.model_dump()
    where = nul_at(content)
    if where is not None:  # no database stores it alike (PostgreSQL refuses it): refused here
        nul: list[dict[str, Any]] = [{"loc": where[:1], "msg": NUL_TECHNICAL, "type": NUL_KIND}]
        raise ElicitValidationError(elicit_id, model.__name__, nul, pydantic_messages(nul, model))
    try:
        return Accept(model.model_validate(content, context=context))
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        human = pydantic_messages(exc.errors(include_url=False, include_input=False), model)
        raise ElicitValidationError(elicit_id, model.__name__, cast(Any, errors), human) from None


@functools.cache
def _schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """A key's JSON Schema, made once per model (``with_context`` copies before adding)."""
    return model.model_json_schema()


@dataclass(frozen=True, slots=True)
class ElicitId:
    """Structured id of one elicitation: which tool, which key, which call, which question."""

    tool_name: str
    key: str
    call_id: str
    seq: int

    def __str__(self) -> str:
        return f"{self.tool_name}:{self.key}:{self.call_id}:{self.seq}"

    @classmethod
    def parse(cls, value: str | ElicitId) -> ElicitId:
        """Parse the string form ``tool:key:call_id:seq`` (call ids may contain ':')."""
        if isinstance(value, ElicitId):
            return value
        head = value.split(":", 2)
        if len(head) == 3 and head[0] and head[1]:
            call_id, sep, seq = head[2].rpartition(":")
            if sep and call_id and seq.isdigit() and int(seq) >= 1:
                return cls(head[0], head[1], call_id, int(seq))
        raise ValueError(
            f"not an elicitation id: {value!r}; expected 'tool_name:key:call_id:seq' "
            "with seq a positive integer"
        )


@dataclass(frozen=True, slots=True)
class ElicitSchema:
    """The response model of a key and its JSON Schema (with ``x-model-context``)."""

    model: type[BaseModel]
    json: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ElicitRequest(Generic[A]):
    """One question a tool asks: what to show, which shape the answer has (``A``, the answer
    model, for handlers registered with a typed key: ``ElicitRequest[PickSeat]``).

    ``mode`` is ``"url"`` for a question answered on a page of its own (``ctx.elicit_url``):
    the user opens ``url`` (an absolute one-time link, filled in by the session before the
    question is shown) and the page reports the answer; hosts only offer the link.
    ``exits`` and ``changes``: what it offers besides an answer (``chatbridge.author.exits``).
    """

    id: ElicitId
    message: str
    schema: ElicitSchema
    context: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    ui: dict[str, Any] | None = None
    mode: ElicitMode = "form"
    url: str | None = None
    # The exits it offers (its author's words, said in the asking language) and the earlier
    # answers it offers to change: filled in by the session when the question is shown.
    exits: QuestionExits = NO_DECLARED_EXITS
    changes: tuple[Change, ...] = ()

    @property
    def key(self) -> str:
        return self.id.key

    @property
    def tool_name(self) -> str:
        return self.id.tool_name

    @property
    def call_id(self) -> str:
        return self.id.call_id

    @property
    def seq(self) -> int:
        return self.id.seq

    @property
    def wire_message(self) -> str:
        """The message with the ``x-model-context`` boundary appended (DESIGN §4)."""
        return encode_message(self.message, self.context)

    @classmethod
    def build(
        cls,
        elicit_id: ElicitId,
        model: type[BaseModel],
        message: str,
        context: dict[str, Any],
        params: dict[str, Any],
        ui: dict[str, Any] | None,
        mode: ElicitMode = "form",
    ) -> ElicitRequest:
        """Create a request whose schema carries the context as ``x-model-context``."""
        schema = with_context(_schema_of(model), context)
        return cls(elicit_id, message, ElicitSchema(model, schema), context, params, ui, mode)

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as sent to browsers and stored in records."""
        return {
            "elicit_id": str(self.id),
            "tool_name": self.tool_name,
            "key": self.key,
            "call_id": self.call_id,
            "seq": self.seq,
            "message": self.message,
            "context": self.context,
            "requested_schema": self.schema.json,
            "params": self.params,
            "ui": self.ui,
            "mode": self.mode,
            "url": self.url,
        }


# -- the rules of an answer ---------------------------------------------------------------

RuleCheck = Callable[..., None]


class AnswerRefused(PydanticCustomError):
    """Raised by a rule (or any pydantic validator): refuse the answer with ``message`` as is.

    A plain ``ValueError`` reaches the user as "Value error, <message>"; this one does not.
    """

    def __new__(cls, message: str) -> AnswerRefused:
        # The message goes in as a context value, so braces in it are never a template.
        return super().__new__(cls, "answer_refused", "{message}", {"message": message})


def answer_rule(field: str, *fields: str) -> Callable[[RuleCheck], Any]:
    """Declare a rule for ``field`` (and ``fields``) of an answer model, checked with the
    question's context.

    The decorated function is called as ``check(cls, value, context)``, or
    ``check(cls, value, context, answer)`` if it takes four arguments (``answer``: the fields
    validated before this one), and refuses by raising ``AnswerRefused``.
    """

    def decorate(check: RuleCheck) -> Any:
        wants_answer = len(inspect.signature(check).parameters) >= 4

        def run(cls: Any, value: Any, info: ValidationInfo) -> Any:
            context = info.context
            if context is None:  # not a question: no rules
                return value
            if wants_answer:
                check(cls, value, context, info.data)
            else:
                check(cls, value, context)
            return value

        run.__name__ = run.__qualname__ = getattr(check, "__name__", "answer_rule")
        run.__doc__ = check.__doc__
        return field_validator(field, *fields, mode="after")(classmethod(run))

    return decorate
