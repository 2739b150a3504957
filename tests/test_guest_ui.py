"""guest_ui on the server: jsonschema first, refusals in the model's words, errors go back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from chatbridge import (
    Accept,
    Cancel,
    Decline,
    ElicitId,
    ElicitRequest,
    FormPost,
    PluginContext,
    guest_ui,
)
from chatbridge.author.elicit import validate_result
from chatbridge.author.exceptions import ElicitValidationError
from chatbridge.author.guest_ui import JSON_FIELD, schema_errors
from chatbridge.chat.templatetags.chatbridge_tags import refusal
from chatbridge.mcp.hosts import errors_text
from plugins.choose_color.tool import ColorChoice, choose_color_plugin

SCHEMA = ColorChoice.model_json_schema()
UI = {"uri": "ui://color-picker", "mode": "modal", "context": {"theme": "dark"}}


def request(ui: Any = UI) -> ElicitRequest:
    return ElicitRequest.build(
        ElicitId("choose_color", "color", "c1", 1), ColorChoice, "Pick", {}, {}, ui
    )


class Host:
    """The browser host: relays the guest's submissions as the page's form does."""

    def __init__(self, *posts: FormPost) -> None:
        self.posts = list(posts)
        self.shown: list[dict[str, Any]] = []

    async def show(self, template: str, context: dict[str, Any], errors: Any) -> FormPost:
        self.shown.append({"template": template, "errors": errors, **context})
        return self.posts.pop(0)


def guest(action: str = "accept", **content: Any) -> FormPost:
    return FormPost(action, {JSON_FIELD: json.dumps(content)})  # type: ignore[arg-type]


def test_schema_errors_are_reported_by_field() -> None:
    assert schema_errors(SCHEMA, {"color": "#12ab34"}) == {}
    assert schema_errors(SCHEMA, {}) == {"color": ["This field is required"]}
    found = schema_errors(SCHEMA, {"color": "#zzz", "name": 5})
    assert found == {
        "color": ["Enter a colour as # and six hex digits, like #1a2b3c"],
        "name": ["Enter some text"],
    }
    # The validator's own words stay with each message, for the logs and the record.
    assert [m.technical for m in found["color"]] == [  # type: ignore[attr-defined]
        "'#zzz' does not match '^#[0-9a-fA-F]{6}$'"
    ]
    assert schema_errors(SCHEMA, ["not", "an", "object"]) == {
        "__all__": ["The answer must be a set of fields, as the form sends it"]
    }


async def test_invalid_submissions_go_back_to_the_guest_and_never_reach_the_tool() -> None:
    host = Host(guest(color="#zzz"), guest(color="#12AB34", name="Moss"))
    result = await guest_ui(request(), PluginContext(request(), host))
    assert result == Accept(ColorChoice(color="#12AB34", name="Moss"))
    first, second = host.shown
    assert first["template"] == "chatbridge/guest_ui.html" and first["mode"] == "modal"
    assert first["guest_context"] == {"theme": "dark"} and first["errors"] == {}
    # Refused by the schema and the model alike: in the model's words (DESIGN §9).
    assert second["errors"] == {"color": ["Enter a colour as # and six hex digits, like #1a2b3c"]}
    assert json.loads(second["values"][JSON_FIELD]) == {"color": "#zzz"}


@pytest.mark.parametrize(
    "bad",
    [{"color": "#zzz"}, {}, {"color": "#123456", "name": "x" * 41}, {"color": 5, "name": 6}],
)
async def test_a_refused_answer_is_worded_for_the_guest_as_mcp_words_it(
    bad: dict[str, Any],
) -> None:
    """The guest in the chat and an MCP client (``_ui_answer``, forms) read the same words."""
    host = Host(guest(**bad), guest("cancel"))
    assert await guest_ui(request(), PluginContext(request(), host)) == Cancel()
    with pytest.raises(ElicitValidationError) as refused:
        validate_result(Accept(bad), ColorChoice, "choose_color:color:c1:1")
    assert refusal(host.shown[1]["errors"]) == errors_text(refused.value)
    assert refusal({}) == ""


async def test_what_only_the_schema_refuses_is_refused_in_its_words() -> None:
    """The jsonschema check stays the first line: the model would take "5" as 5."""

    class Count(BaseModel):
        n: int

    counted = ElicitRequest.build(ElicitId("t", "n", "c1", 1), Count, "How many?", {}, {}, UI)
    host = Host(guest(n="5"), guest(n=5))
    assert await guest_ui(counted, PluginContext(counted, host)) == Accept(Count(n=5))
    assert host.shown[1]["errors"] == {"n": ["Enter a whole number"]}


async def test_garbage_json_and_decline() -> None:
    host = Host(FormPost("accept", {JSON_FIELD: "{oops"}), guest("decline"))
    assert await guest_ui(request(), PluginContext(request(), host)) == Decline()
    assert host.shown[1]["errors"] == {"color": ["This field is required"]}  # the model's


async def test_a_question_without_a_ui_uri_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="guest_ui needs ctx.elicit\\(..., ui="):
        await guest_ui(request(ui=None), PluginContext(request(ui=None), Host()))


def test_the_plugin_serves_its_guest_ui() -> None:
    assert choose_color_plugin.ui_resources == {
        "ui://color-picker": "choose_color/color_picker.html"
    }
