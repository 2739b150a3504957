"""``guest_ui``: a ready handler that delegates a question to a sandboxed guest UI (seed 004).

The tool asks with ``ui={"uri": "ui://…", "mode": "modal"|"inline", "context": {...}}``; the
browser host shows the plugin's guest page in a sandboxed iframe and relays its
answers to the server (``_ui_answer`` of an MCP App, or seed 004's ``ui/submit-elicitation``),
where every submission is checked against the ``requestedSchema`` with ``jsonschema`` and the
key's model. Errors go back to the guest; nothing invalid reaches the tool. An answer both
refuse is refused with the model's words, as every other transport refuses it (DESIGN §9).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import Draft202012Validator

from chatbridge.author.elicit import Accept, ElicitRequest, ElicitResult, validate_result
from chatbridge.author.exceptions import ElicitValidationError
from chatbridge.author.human import schema_error_message
from chatbridge.author.model_context import CONTEXT_KEY
from chatbridge.author.plugins import FieldErrors, PluginContext

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
                    props = schema.get("properties") or {}
                    errors.setdefault(str(name), []).append(
                        schema_error_message(
                            "required", True, props.get(name) or {}, str(name), error.message
                        )
                    )
            continue
        field = str(error.absolute_path[0]) if error.absolute_path else "__all__"
        # An optional field (anyOf [X, null]): X's own complaint, not "not valid under any".
        cause = next((e for e in error.context or () if e.validator != "type"), error)
        errors.setdefault(field, []).append(
            schema_error_message(
                str(cause.validator),
                cause.validator_value,
                cause.schema if isinstance(cause.schema, Mapping) else {},
                "" if field == "__all__" else field,
                error.message,
            )
        )
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


def _first_line(request: ElicitRequest) -> Callable[[dict[str, Any]], FieldErrors]:
    """The ``jsonschema`` check, in the model's words where the model refuses the answer too:
    the schema's own words are shown only for what the model alone would have taken."""
    schema = request.schema.json

    def check(data: dict[str, Any]) -> FieldErrors:
        found = schema_errors(schema, data)
        if not found:
            return found
        try:
            validate_result(
                Accept(data), request.schema.model, str(request.id), context=request.context
            )
        except ElicitValidationError as exc:
            return exc.field_errors()
        return found

    return check


async def guest_ui(request: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
    """Show the guest UI named by ``request.ui``; return its validated answer."""
    ui = request.ui or {}
    if not str(ui.get("uri", "")).startswith("ui://"):
        raise ValueError(
            f"{request.id}: guest_ui needs ctx.elicit(..., ui={{'uri': 'ui://…'}}); got ui={ui!r}"
        )
    guest_context = {**(ui.get("context") or {}), **request.context}
    submission = await ctx.render(
        GUEST_UI_TEMPLATE,
        {"ui": ui, "mode": ui.get("mode", "inline"), "guest_context": guest_context},
        prepare=_content,
        precheck=_first_line(request),
    )
    return submission.result
