"""Reading the JSON Schemas pydantic writes: the fields of a model, for people and forms."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FieldInfo", "describe_fields", "resolve_ref"]


@dataclass(frozen=True)
class FieldInfo:
    """One property of an object schema, in words."""

    name: str
    type: str
    required: bool
    description: str = ""
    default: Any = None
    has_default: bool = False
    choices: tuple[Any, ...] = ()


def resolve_ref(schema: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with a local ``$ref`` (``#/$defs/…``, as pydantic writes) merged in."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = root.get("$defs", {}).get(ref.removeprefix("#/$defs/"))
        if isinstance(target, Mapping):
            return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return dict(schema)


def _type_name(schema: Mapping[str, Any], root: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
    schema = resolve_ref(schema, root)
    if "const" in schema:
        return "constant", (schema["const"],)
    if "enum" in schema:
        return "choice", tuple(schema["enum"])
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(options, list):
        names: list[str] = []
        choices: tuple[Any, ...] = ()
        for option in options:
            name, opts = _type_name(option, root)
            if name not in names:
                names.append(name)
            choices += opts
        return " or ".join(names), choices
    kind = schema.get("type")
    if kind == "array":
        item, _ = _type_name(schema.get("items") or {}, root)
        return f"list of {item}", ()
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind), ()
    if isinstance(kind, str):
        fmt = schema.get("format")
        return f"{kind} ({fmt})" if fmt else kind, ()
    return "any", ()


def describe_fields(schema: Mapping[str, Any]) -> list[FieldInfo]:
    """The properties of an object schema, in declaration order."""
    root = schema
    schema = resolve_ref(schema, root)
    required = set(schema.get("required") or ())
    fields = []
    for name, prop in (schema.get("properties") or {}).items():
        resolved = resolve_ref(prop, root)
        type_name, choices = _type_name(resolved, root)
        fields.append(
            FieldInfo(
                name=name,
                type=type_name,
                required=name in required,
                description=str(resolved.get("description") or ""),
                default=resolved.get("default"),
                has_default="default" in resolved,
                choices=choices,
            )
        )
    return fields
