"""MCP form elicitation wants flat schemas: top-level primitives, enums and lists of enum
strings. The SDK draws them (``render_elicitation_schema``: optional fields without ``null``,
checked against the specification's ``PrimitiveSchemaDefinition``); this module only turns a
model it refuses into a definition error, raised when the server is built, not on a call."""

from __future__ import annotations

from typing import Any

from mcp.server.elicitation import render_elicitation_schema
from pydantic import BaseModel

from chatbridge.core.exceptions import ToolDefinitionError

__all__ = ["flat_schema"]


def flat_schema(tool: str, key: str, model: type[BaseModel]) -> dict[str, Any]:
    """The MCP form schema of ``model``; ``ToolDefinitionError`` names what is not flat."""
    try:
        return render_elicitation_schema(model)
    except TypeError as exc:
        raise ToolDefinitionError(
            f"Tool {tool!r} cannot be served over MCP: the answer to {key!r} "
            f"({model.__name__}) does not fit an MCP form. {exc}. MCP form elicitation takes "
            "strings, numbers, integers, booleans, Literal choices and lists of Literal "
            "strings; flatten the model or keep the tool in-app only."
        ) from None
