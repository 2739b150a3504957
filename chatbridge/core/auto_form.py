"""``auto_form``: a ready ``on_elicit`` handler that draws a form from the key's JSON Schema.

Strings (with the formats email, uri, date and date-time, lengths and patterns), numbers and
integers (with bounds), booleans, enums (radio buttons up to three options, else a select),
arrays of enums (checkboxes), titles, descriptions, defaults and required marks. Answers go
through the same validate-and-show-again loop as hand-written templates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chatbridge.core.elicit import ElicitRequest, ElicitResult
from chatbridge.core.plugins import PluginContext
from chatbridge.core.schema import resolve_ref

__all__ = ["AUTO_FORM_TEMPLATE", "FormField", "auto_form", "coerce_post", "form_fields"]

AUTO_FORM_TEMPLATE = "chatbridge/auto_form.html"
RADIO_LIMIT = 3
TEXTAREA_FROM = 200
_FORMATS = {"email": "email", "uri": "url", "date": "date", "date-time": "datetime-local"}


@dataclass(frozen=True)
class FormField:
    """One input of an automatic form."""

    name: str
    label: str
    widget: (
        str  # text email url date datetime-local number checkbox radio select checkboxes textarea
    )
    required: bool
    help: str = ""
    default: Any = None
    choices: tuple[Any, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)  # min max step minlength maxlength pattern


def _unwrap_optional(
    schema: dict[str, Any], root: Mapping[str, Any]
) -> tuple[dict[str, Any], bool]:
    """``X | None`` → (X, True); anything else → (schema, False)."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        real = [o for o in options if o.get("type") != "null"]
        if len(real) == 1 and len(real) < len(options):
            merged = {
                **resolve_ref(real[0], root),
                **{k: v for k, v in schema.items() if k != "anyOf"},
            }
            return merged, True
    return schema, False


def _choices(schema: Mapping[str, Any]) -> tuple[Any, ...]:
    if "enum" in schema:
        return tuple(schema["enum"])
    options = schema.get("anyOf") or schema.get("oneOf") or ()
    return tuple(o["const"] for o in options if isinstance(o, Mapping) and "const" in o)


def _field(
    name: str, prop: Mapping[str, Any], root: Mapping[str, Any], required: bool
) -> FormField:
    schema, optional = _unwrap_optional(resolve_ref(prop, root), root)
    label = str(schema.get("title") or name.replace("_", " ").capitalize())
    common: dict[str, Any] = {
        "name": name,
        "label": label,
        "required": required and not optional,
        "help": str(schema.get("description") or ""),
        "default": schema.get("default"),
    }
    choices = _choices(schema)
    kind = schema.get("type")
    if choices:
        widget = "radio" if len(choices) <= RADIO_LIMIT else "select"
        return FormField(widget=widget, choices=choices, **common)
    if kind == "array":
        items = resolve_ref(schema.get("items") or {}, root)
        return FormField(widget="checkboxes", choices=_choices(items), **common)
    if kind == "boolean":
        return FormField(widget="checkbox", **{**common, "required": False})
    if kind in ("integer", "number"):
        attrs = {"step": 1 if kind == "integer" else "any"}
        for key, attr in (("minimum", "min"), ("maximum", "max")):
            if key in schema:
                attrs[attr] = schema[key]
        return FormField(widget="number", attrs=attrs, **common)
    attrs = {
        attr: schema[key]
        for key, attr in (
            ("minLength", "minlength"),
            ("maxLength", "maxlength"),
            ("pattern", "pattern"),
        )
        if key in schema
    }
    widget = _FORMATS.get(str(schema.get("format")), "text")
    if widget == "text" and int(schema.get("maxLength") or 0) > TEXTAREA_FROM:
        widget = "textarea"
    return FormField(widget=widget, attrs=attrs, **common)


def form_fields(schema: Mapping[str, Any]) -> list[FormField]:
    """The inputs for an object schema, in declaration order."""
    root = resolve_ref(schema, schema)
    required = set(root.get("required") or ())
    props: Mapping[str, Any] = root.get("properties") or {}
    return [_field(name, prop, schema, name in required) for name, prop in props.items()]


def coerce_post(fields: list[FormField], data: Mapping[str, Any]) -> dict[str, Any]:
    """Browser values → what the model validates: checkboxes become booleans and lists, empty
    optional inputs are left out (their defaults apply), unknown names are dropped."""
    out: dict[str, Any] = {}
    for f in fields:
        value = data.get(f.name)
        if f.widget == "checkbox":
            out[f.name] = str(value).lower() in ("on", "true", "1", "yes") if value else False
        elif f.widget == "checkboxes":
            out[f.name] = (
                [] if value in (None, "") else value if isinstance(value, list) else [value]
            )
        elif value is None or (value == "" and (not f.required or f.widget == "number")):
            continue
        else:
            out[f.name] = value
    return out


async def auto_form(request: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
    """Render the key's schema as a form; return the validated answer (or decline/cancel)."""
    fields = form_fields(request.schema.json)
    submission = await ctx.render(
        AUTO_FORM_TEMPLATE, {"fields": fields}, prepare=lambda data: coerce_post(fields, data)
    )
    return submission.result
