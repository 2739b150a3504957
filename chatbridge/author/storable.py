"""Text every database stores: the one rule about NUL characters, and records of refusals.

PostgreSQL refuses a NUL character (U+0000) in text columns and ``\\u0000`` in jsonb; SQLite
stores both. So that a call behaves the same on either database, text from outside (a chat
message, an answer, a reason, a name, a tool's arguments) is refused where it enters, with
words saying what to fix (``nul_at`` finds it); text the server makes itself (a model's reply)
is stored with NUL replaced (``without_nul``), so no reply can make a write fail.

``for_the_record`` makes a refused answer storable as it came, for the audit record: NUL
replaced, and numbers JSON cannot hold (NaN, ±Infinity, ``1e999``) kept as their names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "NUL",
    "REPLACEMENT",
    "for_the_record",
    "nul_at",
    "scrubbed",
    "without_nul",
]

NUL = "\x00"
REPLACEMENT = "\ufffd"  # what Unicode shows for a character that could not be kept


def nul_at(value: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    """Where the first NUL character of ``value`` is (a path of keys and indexes into it;
    ``()`` for ``value`` itself or a key of it), or None if it has none."""
    if isinstance(value, str):
        return path if NUL in value else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and NUL in key:
                return path
            found = nul_at(item, (*path, str(key)))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = nul_at(item, (*path, index))
            if found is not None:
                return found
    return None


def without_nul(text: str) -> str:
    """``text`` with each NUL character replaced by U+FFFD."""
    return text.replace(NUL, REPLACEMENT) if NUL in text else text


def scrubbed(value: Any) -> Any:
    """``value`` with NUL replaced in every string and key of it; nothing else changes."""
    if isinstance(value, str):
        return without_nul(value)
    if isinstance(value, Mapping):
        return {scrubbed(k): scrubbed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrubbed(v) for v in value]
    return value


def _number(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def for_the_record(value: Any) -> Any:
    """``value`` as JSON every database stores: NUL replaced, NaN and ±Infinity as their names,
    anything else JSON has no type for as its text."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return without_nul(value)
    if isinstance(value, Mapping):
        return {without_nul(str(k)): for_the_record(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [for_the_record(v) for v in value]
    return without_nul(str(value))
