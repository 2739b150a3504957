"""MCP form elicitation wants flat schemas: top-level primitives and enums only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from chatbridge.core.exceptions import ToolDefinitionError
from chatbridge.core.schema import resolve_ref

__all__ = ["flat_schema"]

_PRIMITIVES = ("string", "number", "integer", "boolean")
_KEEP = (
    "title",
    "description",
    "default",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
)


def _flat_property(
    prop: Mapping[str, Any], root: Mapping[str, Any]
) -> tuple[dict[str, Any], bool] | None:
    """(flat property, optional) or None when the property is not flat."""
    schema = resolve_ref(prop, root)
    optional = False
    options = schema.get("anyOf")
    if isinstance(options, list):
        real = [o for o in options if o.get("type") != "null"]
        if len(real) != 1:
            return None
        optional = len(real) < len(options)
        schema = {**resolve_ref(real[0], root), **{k: v for k, v in schema.items() if k != "anyOf"}}
    kept = {k: schema[k] for k in _KEEP if k in schema and schema[k] is not None}
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
        return {**kept, "type": "string", "enum": list(schema["enum"])}, optional
    if schema.get("type") == "array":
        items = resolve_ref(schema.get("items") or {}, root)
        if "enum" in items and all(isinstance(v, str) for v in items["enum"]):
            return {
                **kept,
                "type": "array",
                "items": {"type": "string", "enum": list(items["enum"])},
            }, optional
        return None
    if schema.get("type") in _PRIMITIVES:
        return {**kept, "type": schema["type"]}, optional
    return None


def flat_schema(tool: str, key: str, model: type[BaseModel]) -> dict[str, Any]:
    """The MCP form schema of ``model``; ``ToolDefinitionError`` names what is not flat."""
    root = model.model_json_schema()
    required = set(root.get("required") or ())
    properties: dict[str, Any] = {}
    needed = []
    for name, prop in (root.get("properties") or {}).items():
        flat = _flat_property(prop, root)
        if flat is None:
            raise ToolDefinitionError(
                f"Tool {tool!r} cannot be served over MCP: the answer to {key!r} "
                f"({model.__name__}) has field {name!r}, which is not a string, number, integer, "
                "boolean, enum or list of enum strings. MCP form elicitation needs flat models; "
                "flatten the model or keep the tool in-app only."
            )
        properties[name], optional = flat
        if name in required and not optional:
            needed.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if needed:
        schema["required"] = needed
    return schema
