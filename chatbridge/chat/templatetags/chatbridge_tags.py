"""Small template helpers for ChatBridge forms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template

from chatbridge.core.exceptions import field_errors_text, refusal_text

register = template.Library()


@register.filter
def lookup(mapping: Any, key: str) -> Any:
    """``mapping[key]`` or None."""
    return mapping.get(key) if isinstance(mapping, Mapping) else None


@register.simple_tag
def field_value(values: Any, field: Any) -> Any:
    """The value to show in an input: the last post if there was one, else the default."""
    if isinstance(values, Mapping) and values:
        return values.get(field.name)
    return field.default


@register.filter
def contains(container: Any, item: Any) -> bool:
    """``item in container``, with lists and single values alike, compared as text."""
    if container is None:
        return False
    items = container if isinstance(container, list | tuple | set) else [container]
    return str(item) in {str(i) for i in items}


@register.filter
def refusal(errors: Any) -> str:
    """The refusal of the last answer as every transport words it ("" when none)."""
    if not isinstance(errors, Mapping) or not errors:
        return ""
    return refusal_text(field_errors_text(errors))
