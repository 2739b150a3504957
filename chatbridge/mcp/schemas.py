"""Each client gets the form schema its negotiated protocol version allows.

Form elicitation arrived in 2025-06-18 with single-select enums only; multi-select (an array of
enum strings) came with 2025-11-25 (SEP-1330). A 2025-06-18 client (TypeScript SDK 1.17.5)
rejects the whole request when it meets an array, so an older client gets such a field as a
string listing the options, and its comma-separated answer is read back into the list before
the session validates it: the tool sees the same answer on every version.

Annotation keywords that no version's schema lists (``pattern``, and ``default`` before
2025-11-25) are kept: clients ignore keywords they do not know, and those that know them
validate and prefill better. Only what would make a client refuse the request is changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_types.version import KNOWN_PROTOCOL_VERSIONS

__all__ = ["for_version", "read_back"]

_MULTI_SELECT_SINCE = "2025-11-25"


def _has_multi_select(version: str) -> bool:
    if version not in KNOWN_PROTOCOL_VERSIONS:
        return False  # unknown strings compare conservatively
    return KNOWN_PROTOCOL_VERSIONS.index(version) >= KNOWN_PROTOCOL_VERSIONS.index(
        _MULTI_SELECT_SINCE
    )


def _degraded(name: str, prop: Mapping[str, Any]) -> dict[str, Any]:
    options = ", ".join(prop["items"]["enum"])
    hint = f"Any of: {options} (separate several with commas)."
    description = f"{prop['description']} {hint}" if prop.get("description") else hint
    out = {k: v for k, v in prop.items() if k not in ("items", "minItems", "maxItems")}
    out.update(type="string", description=description)
    if isinstance(prop.get("default"), list):
        out["default"] = ", ".join(prop["default"])
    return out


def _multi_selects(flat: Mapping[str, Any]) -> list[str]:
    properties = flat.get("properties", {})
    return [name for name, prop in properties.items() if prop.get("type") == "array"]


def for_version(flat: Mapping[str, Any], version: str) -> dict[str, Any]:
    """``flat`` (from ``flat.flat_schema``) as ``version`` allows it."""
    names = _multi_selects(flat)
    if not names or _has_multi_select(version):
        return dict(flat)
    properties = dict(flat["properties"])
    for name in names:
        properties[name] = _degraded(name, properties[name])
    return {**flat, "properties": properties}


def read_back(
    content: Mapping[str, Any] | None, flat: Mapping[str, Any], version: str
) -> dict[str, Any] | None:
    """A client's answer to ``for_version(flat, version)`` in the shape of ``flat``."""
    if content is None or _has_multi_select(version):
        return dict(content) if content is not None else None
    out = dict(content)
    for name in _multi_selects(flat):
        value = out.get(name)
        if isinstance(value, str):
            out[name] = [part.strip() for part in value.split(",") if part.strip()]
    return out
