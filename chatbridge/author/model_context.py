"""``x-model-context``: carry an elicitation's context data in its schema and its message.

The context travels twice (DESIGN §4): as the JSON Schema extension
``requestedSchema["x-model-context"]`` and as a boundary section appended to the message::

    <human readable message>

    --x-model-context: application/json
    {"flights": [...]}

Extraction prefers the schema and falls back to the message, so a client that strips unknown
schema keywords still delivers the data. Everything here is a pure function.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BOUNDARY",
    "CONTEXT_KEY",
    "encode_message",
    "extract_context",
    "split_message",
    "with_context",
]

CONTEXT_KEY = "x-model-context"
MIME = "application/json"
BOUNDARY = f"--{CONTEXT_KEY}: {MIME}"

# The section is the last thing in the message: a boundary line at the start or after a blank
# line, then exactly one line of JSON (json.dumps never emits a raw newline).
_SECTION = re.compile(r"(?:\A|\n\n)--x-model-context: (?P<mime>[^\n]*)\n(?P<body>[^\n]*)\Z")


def _dumps(context: Mapping[str, Any]) -> str:
    return json.dumps(context, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_message(message: str, context: Mapping[str, Any]) -> str:
    """Append the context section to ``message``.

    An empty context adds nothing, unless the message itself ends in something that looks like
    a section: then an empty one is appended so that ``split_message`` gives the message back.
    """
    if not context and not _SECTION.search(message):
        return message
    separator = "\n\n" if message else ""
    return f"{message}{separator}{BOUNDARY}\n{_dumps(context)}"


def split_message(wire_message: str) -> tuple[str, dict[str, Any] | None]:
    """Split a wire message into the human message and its context.

    Returns ``(message, None)`` when there is no section, or when it is garbled (invalid JSON,
    not an object, an unknown MIME type): the whole text then stays the message, nothing lost.
    """
    match = _SECTION.search(wire_message)
    if match is None or match.group("mime") != MIME:
        return wire_message, None
    try:
        context = json.loads(match.group("body"))
    except ValueError:
        return wire_message, None
    if not isinstance(context, dict):
        return wire_message, None
    return wire_message[: match.start()], context


def with_context(schema: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` carrying ``context`` as ``x-model-context`` (if any): a copy, or without a
    context to add or drop, ``schema`` itself (schemas are shared and read only: every
    suspended question of a key holds its model's one schema)."""
    if not context and CONTEXT_KEY not in schema and isinstance(schema, dict):
        return schema
    out = dict(schema)
    if context:
        out[CONTEXT_KEY] = dict(context)
    else:
        out.pop(CONTEXT_KEY, None)
    return out


def extract_context(schema: Mapping[str, Any] | None, message: str) -> dict[str, Any]:
    """The context of an elicitation: from the schema if present, else from the message."""
    if schema is not None:
        from_schema = schema.get(CONTEXT_KEY)
        if isinstance(from_schema, dict):
            return from_schema
    _, from_message = split_message(message)
    return from_message or {}
