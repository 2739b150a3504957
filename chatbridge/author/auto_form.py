"""``auto_form``: a ready ``on_elicit`` handler that draws a form from the key's JSON Schema.

The chat draws it as a Django form (``chatbridge.chat.auto_forms``: every kind of field, bound
values kept after a refusal, errors tied to their inputs) and reads the browser's post back
with it; the answer then goes through the same validate-and-show-again loop as hand-written
templates, so the key's model alone decides what counts. The core imports no Django: the chat
app hands its reader in with ``use_form_reader`` when Django starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chatbridge.author.elicit import ElicitRequest, ElicitResult
from chatbridge.author.plugins import PluginContext

__all__ = ["AUTO_FORM_TEMPLATE", "FormReader", "auto_form", "use_form_reader"]

AUTO_FORM_TEMPLATE = "chatbridge/auto_form.html"

# (the key's JSON Schema, the browser's post) → what the model validates
FormReader = Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]
_reader: list[FormReader] = []


def use_form_reader(reader: FormReader) -> None:
    """Read automatic forms' posts with ``reader`` (the chat app's, set once at start-up)."""
    _reader[:] = [reader]


async def auto_form(request: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
    """Render the key's schema as a form; return the validated answer (or decline/cancel)."""
    schema = request.schema.json

    def prepare(data: dict[str, Any]) -> dict[str, Any]:
        return _reader[0](schema, data) if _reader else data

    submission = await ctx.render(AUTO_FORM_TEMPLATE, {"schema": schema}, prepare=prepare)
    return submission.result
