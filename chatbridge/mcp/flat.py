"""MCP form elicitation wants flat schemas: top-level primitives, enums and lists of enum
strings. The SDK draws them (``render_elicitation_schema``: optional fields without ``null``,
checked against the specification's ``PrimitiveSchemaDefinition``); this module only turns a
model it refuses into a definition error, raised when the server is built, not on a call.

The SDK's renderer leaves an ``Enum`` class as a reference to its definition, which a form
schema cannot hold; such fields are drawn as the ``Literal`` of their values (what a client
sends either way), on a copy of the model used for the schema only.
"""

from __future__ import annotations

import enum
import functools
import operator
import types
import typing
from typing import Any, Literal

from mcp.server.elicitation import render_elicitation_schema
from pydantic import BaseModel, create_model

from chatbridge.author.approval import APPROVAL_KEY, Approval
from chatbridge.author.exceptions import ToolDefinitionError
from chatbridge.author.tools import McpTool

__all__ = ["flat_schema", "flat_schemas", "questions_of"]


def _literal_enums(annotation: Any) -> Any:
    """``annotation`` with every ``Enum`` class in it replaced by the ``Literal`` of its
    values (inside lists, optionals and ``Annotated`` too)."""
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return Literal[tuple(member.value for member in annotation)]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if not args:
        return annotation
    new = tuple(_literal_enums(a) for a in args)
    if new == args:
        return annotation
    if origin is typing.Annotated:
        return typing.Annotated[(new[0], *annotation.__metadata__)]
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, new)
    return origin[new] if origin is not None else annotation


def _drawable(model: type[BaseModel]) -> type[BaseModel]:
    """``model``, or a copy of it whose ``Enum`` fields are ``Literal`` ones."""
    fields = {
        name: (_literal_enums(info.annotation), info) for name, info in model.model_fields.items()
    }
    if all(new is model.model_fields[name].annotation for name, (new, _) in fields.items()):
        return model
    return create_model(model.__name__, __doc__=model.__doc__, **fields)  # type: ignore[call-overload, no-any-return]


def flat_schema(tool: str, key: str, model: type[BaseModel]) -> dict[str, Any]:
    """The MCP form schema of ``model``; ``ToolDefinitionError`` names what is not flat."""
    try:
        return render_elicitation_schema(_drawable(model))
    except TypeError as exc:
        raise ToolDefinitionError(
            f"Tool {tool!r} cannot be served over MCP: the answer to {key!r} "
            f"({model.__name__}) does not fit an MCP form. {exc}. MCP form elicitation takes "
            "strings, numbers, integers, booleans, choices (Literal or Enum) and lists of "
            "them."
        ) from None


def questions_of(tool: McpTool[Any, Any]) -> dict[str, type[BaseModel]]:
    """Every question a call of ``tool`` may ask: its keys, and the approval if it needs one."""
    approval = {APPROVAL_KEY: Approval} if tool.needs_approval else {}
    return {**approval, **tool.elicits}


def flat_schemas(tool: McpTool[Any, Any]) -> dict[str, dict[str, Any]]:
    """The MCP form schema of each of ``tool``'s questions; ``ToolDefinitionError`` names the
    first one an MCP form cannot carry (and its field)."""
    return {key: flat_schema(tool.name, key, model) for key, model in questions_of(tool).items()}
