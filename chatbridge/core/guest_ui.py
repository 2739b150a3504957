"""``guest_ui``: a ready handler that delegates a question to a sandboxed guest UI (seed 004).

The tool asks with ``ui={"uri": "ui://…", "mode": "modal"|"inline", "context": {...}}``; the
browser host shows the plugin's guest page in a sandboxed iframe and relays its
``ui/submit-elicitation`` to the server, where every submission is checked against the
``requestedSchema`` with ``jsonschema`` (the authority) and then the key's model. Errors go back
to the guest; nothing invalid reaches the tool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator

from chatbridge.core.elicit import ElicitRequest, ElicitResult
from chatbridge.core.model_context import CONTEXT_KEY
from chatbridge.core.plugins import FieldErrors, PluginContext

__all__ = ["GUEST_UI_TEMPLATE", "JSON_FIELD", "guest_ui", "schema_errors"]

GUEST_UI_TEMPLATE = "chatbridge/guest_ui.html"
JSON_FIELD = "__json__"  # the host page posts the guest's content as one JSON field


def schema_errors(schema: Mapping[str, Any], data: Any) -> FieldErrors:
    """``jsonschema`` errors of ``data`` by top-level field (``__all__`` for the whole)."""
    validator = Draft202012Validator({k: v for k, v in schema.items() if k != CONTEXT_KEY})
    errors: FieldErrors = {}
    for error in sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path)):
        if error.validator == "required" and isinstance(data, Mapping):
            for name in error.validator_value:
                if name not in data:
                    errors.setdefault(str(name), []).append("This field is required.")
            continue
        field = str(error.absolute_path[0]) if error.absolute_path else "__all__"
        errors.setdefault(field, []).append(error.message)
    return errors


def _content(data: dict[str, Any]) -> dict[str, Any]:
    raw = data.get(JSON_FIELD)
    if raw is None:
        return data
    try:
        content = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {JSON_FIELD: "not JSON"}
    return content if isinstance(content, dict) else {JSON_FIELD: content}


async def guest_ui(request: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
    """Show the guest UI named by ``request.ui``; return its validated answer."""
    ui = request.ui or {}
    if not str(ui.get("uri", "")).startswith("ui://"):
        raise ValueError(
            f"{request.id}: guest_ui needs ctx.elicit(..., ui={{'uri': 'ui://…'}}); got ui={ui!r}"
        )
    schema = request.schema.json
    guest_context = {**(ui.get("context") or {}), **request.context}
    submission = await ctx.render(
        GUEST_UI_TEMPLATE,
        {"ui": ui, "mode": ui.get("mode", "inline"), "guest_context": guest_context},
        prepare=_content,
        precheck=lambda data: schema_errors(schema, data),
    )
    return submission.result
