"""Small template helpers for ChatBridge forms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template

from chatbridge.author.exceptions import field_errors_text, refusal_text
from chatbridge.author.human import field_label, human_value
from chatbridge.chat.auto_forms import AutoField
from chatbridge.chat.auto_forms import auto_fields as build_auto_fields

register = template.Library()


@register.simple_tag
def auto_fields(
    schema: Mapping[str, Any], values: Any, errors: Any, call_id: str
) -> list[AutoField]:
    """The fields of an automatic form (``chatbridge.chat.auto_forms``), drawn by Django."""
    return build_auto_fields(schema, values or None, errors or None, call_id)


@register.filter
def refusal(errors: Any) -> str:
    """The refusal of the last answer as every transport words it ("" when none)."""
    if not isinstance(errors, Mapping) or not errors:
        return ""
    return refusal_text(field_errors_text(errors))


_MONEY_SUFFIXES = {"_usd": "USD", "_eur": "EUR", "_gbp": "GBP"}


def _schema_for(key: str) -> dict[str, str]:
    """Money where the name says so: ``price_usd`` is dollars."""
    for suffix, currency in _MONEY_SUFFIXES.items():
        if key.lower().endswith(suffix):
            return {"format": "money", "x-currency": currency}
    return {}


@register.filter
def human(value: Any, currency: str = "") -> str:
    """``value`` as a person writes it: "—" for nothing, Yes/No, "a, b and c", "31 May 2026",
    "$249.00" with a currency (``{{ price|human:"USD" }}``); never a Python repr."""
    schema = {"format": "money", "x-currency": currency} if currency else None
    return human_value(value, schema)


@register.filter
def label(name: Any) -> str:
    """A field's name as words: ``visit_date`` → "Visit date"."""
    return field_label(str(name))


@register.filter
def human_items(mapping: Any) -> list[tuple[str, str]]:
    """A mapping's entries as (label, value) in words, leaving out the empty ones; for a
    definition list."""
    if not isinstance(mapping, Mapping):
        return []
    return [
        (field_label(str(k)), human_value(v, _schema_for(str(k))))
        for k, v in mapping.items()
        if v is not None and v != "" and v != [] and v != {}
    ]
