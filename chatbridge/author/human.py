"""Words for people: validation errors, chat errors and values as a person writes them.

The technical text (pydantic's and jsonschema's messages, exception text) stays in logs and on
record (``HumanText.technical``); what a person reads in the chat, the guest UI or an MCP
client's form is written here, from the error's kind and the field's title, description and
format.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

from chatbridge.author.language import gettext as _
from chatbridge.author.language import gettext_noop

__all__ = [
    "NUL_TECHNICAL",
    "HumanText",
    "field_label",
    "human_list",
    "human_value",
    "pydantic_messages",
    "refused_answers_text",
    "schema_error_message",
]

# The error type of a text with a NUL character (``chatbridge.author.storable``), and its words.
NUL_KIND = "string_nul"
NUL_TECHNICAL = "String should not contain a NUL character (U+0000)"
EMAIL_EXAMPLE = gettext_noop("Enter an email address like name@example.com")
COLOUR_EXAMPLE = gettext_noop("Enter a colour as # and six hex digits, like #1a2b3c")
_COLOUR_PATTERNS = ("^#[0-9a-fA-F]{6}$", "^#[0-9a-f]{6}$", "^#[0-9A-Fa-f]{6}$")


class HumanText(str):
    """A message for a person that remembers the technical text it replaces."""

    technical: str
    label: str

    def __new__(cls, text: str, technical: str = "", label: str = "") -> HumanText:
        made = super().__new__(cls, text)
        made.technical = technical or text
        made.label = label
        return made


def field_label(name: str, schema: Mapping[str, Any] | None = None) -> str:
    """The field's title, or its name as words ("visit_date" → "Visit date")."""
    words = name.replace("_", " ").strip()
    title = (schema or {}).get("title")
    # pydantic's own title ("Flight Id") is the name title-cased: say it as words instead.
    if isinstance(title, str) and title.strip() and title.strip() != words.title():
        return title.strip()
    return words[:1].upper() + words[1:] if words else _("This answer")


def _plain_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A property's schema with ``anyOf: [X, null]`` (an optional field) folded into X."""
    merged = dict(schema)
    for branch in schema.get("anyOf") or ():
        if isinstance(branch, Mapping) and branch.get("type") != "null":
            merged = {**branch, **{k: v for k, v in schema.items() if k != "anyOf"}}
            break
    return merged


@functools.lru_cache(maxsize=256)
def _properties(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    try:
        schema = model.model_json_schema()
    except Exception:  # a model whose schema cannot be drawn still gets generic words
        return {}
    props = schema.get("properties") or {}
    return {str(k): _plain_schema(v) for k, v in props.items() if isinstance(v, Mapping)}


def _pattern_message(schema: Mapping[str, Any], label: str, pattern: str) -> str:
    pattern = str(schema.get("pattern") or pattern or "")
    if schema.get("format") == "email" or "@" in pattern:
        return _(EMAIL_EXAMPLE)
    if pattern in _COLOUR_PATTERNS:
        return _(COLOUR_EXAMPLE)
    description = str(schema.get("description") or "").strip().rstrip(".")
    if description.lower().startswith("like "):
        like = description[0].lower() + description[1:]
        # Translators: "Enter the postcode like AB1 2CD" (the example is the field's own)
        return _("Enter the %(field)s %(example)s") % {"field": label.lower(), "example": like}
    if description:
        return _("Enter the %(field)s in the expected form (%(description)s)") % {
            "field": label.lower(),
            "description": description,
        }
    return _("Enter the %(field)s in the expected form") % {"field": label.lower()}


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _range_message(schema: Mapping[str, Any], fallback: str) -> str:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        return _("Enter a number from %(low)s to %(high)s") % {
            "low": _number(low),
            "high": _number(high),
        }
    return fallback


def _characters(count: Any) -> str:
    return _("1 character") if count == 1 else _("%(count)s characters") % {"count": count}


def _choices(expected: str) -> str:
    return expected.replace("'", "")


def _message(
    kind: str, constraint: Any, schema: Mapping[str, Any], label: str, technical: str
) -> str:
    """The words for one error of ``kind`` (pydantic's error types; jsonschema's are mapped
    onto them) on a field described by ``schema``."""
    if kind in ("missing", "required"):
        return _("This field is required")
    if kind == "string_pattern_mismatch":
        return _pattern_message(schema, label, str(constraint or ""))
    if kind == "string_too_short":
        return (
            _("This field is required")
            if constraint == 1
            else _("Enter at least %(count)s") % {"count": _characters(constraint)}
        )
    if kind == "string_too_long":
        return _("Use at most %(count)s") % {"count": _characters(constraint)}
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = {"bound": _number(constraint)}
        words = {
            "greater_than_equal": _("Enter %(bound)s or more"),
            "greater_than": _("Enter more than %(bound)s"),
            "less_than_equal": _("Enter %(bound)s or less"),
            "less_than": _("Enter less than %(bound)s"),
        }[kind]
        return _range_message(schema, words % bound)
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return _range_message(schema, _("Enter a whole number"))
    if kind in ("float_parsing", "float_type", "decimal_parsing", "decimal_type"):
        return _range_message(schema, _("Enter a number"))
    if kind in ("bool_parsing", "bool_type"):
        return _("Choose yes or no")
    if kind in ("literal_error", "enum"):
        return (
            _("Choose one of: %(choices)s") % {"choices": _choices(str(constraint))}
            if constraint
            else _("Choose one of the options")
        )
    if kind.startswith("date_"):
        return _("Enter a date, like 2026-05-31")
    if kind.startswith("datetime") or kind.startswith("time_"):
        return _("Enter a date and time, like 2026-05-31 14:30")
    if kind.startswith("url_"):
        return _("Enter a web address, like https://example.com")
    if kind == "string_unicode":
        return _("Enter plain text: this has a character that cannot be read")
    if kind == NUL_KIND:
        return _("Enter plain text: this has a NUL character (U+0000), which cannot be saved")
    if kind == "string_type":
        return _("Enter some text")
    if kind in ("list_type", "too_short", "too_long"):
        if kind == "too_short":
            return _("Choose at least %(count)s") % {"count": constraint}
        if kind == "too_long":
            return _("Choose at most %(count)s") % {"count": constraint}
        return _("Choose from the options")
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return _("The answer must be a set of fields, as the form sends it")
    if kind == "extra_forbidden":
        return _("This field is not part of the question")
    if kind == "value_error":
        return technical.removeprefix("Value error, ")
    if kind == "assertion_error":
        return technical.removeprefix("Assertion failed, ")
    return technical


_CONSTRAINT = {
    "string_pattern_mismatch": "pattern",
    "string_too_short": "min_length",
    "string_too_long": "max_length",
    "greater_than_equal": "ge",
    "greater_than": "gt",
    "less_than_equal": "le",
    "less_than": "lt",
    "literal_error": "expected",
    "enum": "expected",
    "too_short": "min_length",
    "too_long": "max_length",
}


def pydantic_messages(
    errors: Sequence[Mapping[str, Any]], model: type[BaseModel] | None = None
) -> list[HumanText]:
    """One message for a person per pydantic error (``errors(include_context=True)``), in order."""
    props = _properties(model) if model is not None else {}
    out = []
    for err in errors:
        loc = tuple(err.get("loc") or ())
        name = str(loc[0]) if loc else ""
        schema = props.get(name, {})
        technical = str(err.get("msg", "invalid"))
        kind = str(err.get("type", ""))
        ctx = err.get("ctx") or {}
        constraint = ctx.get(_CONSTRAINT.get(kind, ""))
        label = field_label(name, schema) if name else ""
        out.append(
            HumanText(_message(kind, constraint, schema, label, technical), technical, label)
        )
    return out


_SCHEMA_KINDS = {
    "pattern": "string_pattern_mismatch",
    "format": "string_pattern_mismatch",
    "minLength": "string_too_short",
    "maxLength": "string_too_long",
    "minimum": "greater_than_equal",
    "exclusiveMinimum": "greater_than",
    "maximum": "less_than_equal",
    "exclusiveMaximum": "less_than",
    "enum": "enum",
    "const": "enum",
    "minItems": "too_short",
    "maxItems": "too_long",
    "additionalProperties": "extra_forbidden",
    "required": "missing",
}
_SCHEMA_TYPES = {
    "string": "string_type",
    "integer": "int_type",
    "number": "float_type",
    "boolean": "bool_type",
    "array": "list_type",
    "object": "dict_type",
}


def schema_error_message(
    validator: str, validator_value: Any, schema: Mapping[str, Any], name: str, technical: str
) -> HumanText:
    """The words for one ``jsonschema`` error (its ``validator``, ``validator_value`` and the
    failing property's ``schema``) on the field ``name``."""
    schema = _plain_schema(schema)
    if validator in ("anyOf", "oneOf"):  # an optional field's value of the wrong kind
        validator, validator_value = "type", schema.get("type")
    if validator == "type":
        wanted = validator_value[0] if isinstance(validator_value, list) else validator_value
        kind = _SCHEMA_TYPES.get(str(wanted), "")
    else:
        kind = _SCHEMA_KINDS.get(validator, "")
    constraint = validator_value
    if kind == "enum" and isinstance(validator_value, list):
        constraint = human_list([str(v) for v in validator_value], "or")
    elif kind == "enum":
        constraint = str(validator_value)
    label = field_label(name, schema) if name else ""
    return HumanText(_message(kind, constraint, schema, label, technical), technical, label)


# --- values -------------------------------------------------------------------------------

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ISO_DATETIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"
)
_MONEY_CODES = {"USD": "$", "EUR": "€", "GBP": "£"}


def human_list(items: Sequence[str], conjunction: str = "and") -> str:
    """``a``, ``a and b``, ``a, b and c`` (``conjunction`` "and" or "or", in the active
    language)."""
    items = [i for i in items if i != ""]
    if len(items) <= 1:
        return "".join(items)
    joined = {"head": ", ".join(items[:-1]), "last": items[-1]}
    if conjunction == "or":
        return _("%(head)s or %(last)s") % joined
    if conjunction == "and":
        return _("%(head)s and %(last)s") % joined
    return f"{joined['head']} {conjunction} {joined['last']}"


def refused_answers_text(count: int, why: str) -> str:
    """What the person is told when their question closed after ``count`` refused answers
    (``why``: the last refusal's errors, in words), in the active language."""
    if count == 1:
        said = _("Not done: your answer was refused, so the question was closed.")
    else:
        said = _(
            "Not done: your answer was refused %(count)s times, so the question was closed."
        ) % {"count": count}
    if not why:
        return said
    # Translators: after "Not done: your answer was refused 5 times, ..."; why is in words
    last = _("Last refusal: %(why)s.") % {"why": why}
    return f"{said} {last}"


_MONTHS = (
    gettext_noop("January"),
    gettext_noop("February"),
    gettext_noop("March"),
    gettext_noop("April"),
    gettext_noop("May"),
    gettext_noop("June"),
    gettext_noop("July"),
    gettext_noop("August"),
    gettext_noop("September"),
    gettext_noop("October"),
    gettext_noop("November"),
    gettext_noop("December"),
)


def _date_text(value: date) -> str:
    day = f"{value.day} {_(_MONTHS[value.month - 1])} {value.year}"
    return f"{day}, {value:%H:%M}" if isinstance(value, datetime) else day


def _money(value: Any, currency: str) -> str:
    amount = Decimal(str(value))
    symbol = _MONEY_CODES.get(currency.upper())
    number = f"{amount:,.2f}"
    return f"{symbol}{number}" if symbol else f"{number} {currency.upper()}"


def human_value(value: Any, schema: Mapping[str, Any] | None = None) -> str:
    """``value`` as a person writes it: "—" for nothing, Yes/No, "a, b and c", dates as
    "31 May 2026", money as "$1,234.50" where ``schema`` says so (``format: money`` with
    ``x-currency``, or a ``currency`` sibling given as ``schema["currency"]``); never a repr."""
    schema = schema or {}
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return _("Yes") if value else _("No")
    if isinstance(value, int | float | Decimal):
        currency = schema.get("x-currency") or schema.get("currency")
        if schema.get("format") == "money" or currency:
            return _money(value, str(currency or "USD"))
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)
    if isinstance(value, date):
        return _date_text(value)
    if isinstance(value, str):
        if _ISO_DATE.fullmatch(value):
            try:
                return _date_text(date.fromisoformat(value))
            except ValueError:
                return value
        if _ISO_DATETIME.fullmatch(value):
            try:
                return _date_text(datetime.fromisoformat(value.replace("Z", "+00:00")))
            except ValueError:
                return value
        return value
    if isinstance(value, Mapping):
        shown = [
            f"{field_label(str(k))}: {human_value(v)}"
            for k, v in value.items()
            if v is not None and v != "" and v != []
        ]
        return "; ".join(shown) if shown else "—"
    if isinstance(value, list | tuple | set | frozenset):
        return human_list([human_value(v) for v in value]) or "—"
    return str(value)
