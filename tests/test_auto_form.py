"""auto_form: fields from JSON Schema, browser values coerced, the usual validation loop."""

from __future__ import annotations

import re
from typing import Any

from django.template.loader import render_to_string

from chatbridge import Accept, ElicitId, ElicitRequest, FormPost, PluginContext, auto_form
from chatbridge.core.auto_form import coerce_post, form_fields
from plugins.feedback.tool import Feedback

SCHEMA = Feedback.model_json_schema()


def widgets() -> dict[str, tuple[str, bool]]:
    return {f.name: (f.widget, f.required) for f in form_fields(SCHEMA)}


def test_every_field_type_gets_its_widget() -> None:
    assert widgets() == {
        "name": ("text", True),
        "email": ("email", True),
        "website": ("url", False),
        "visit_date": ("date", True),
        "call_back_at": ("datetime-local", False),
        "rating": ("number", True),
        "hours_saved": ("number", False),
        "topic": ("select", True),
        "contact": ("radio", False),
        "areas": ("checkboxes", False),
        "subscribe": ("checkbox", False),
        "code": ("text", False),
        "comment": ("textarea", False),
    }
    fields = {f.name: f for f in form_fields(SCHEMA)}
    assert fields["name"].label == "Your name" and fields["name"].attrs == {
        "minlength": 2,
        "maxlength": 40,
    }
    assert fields["rating"].attrs == {"step": 1, "min": 1, "max": 5}
    assert fields["rating"].help == "1 (poor) to 5 (great)"
    assert fields["hours_saved"].attrs == {"step": "any", "min": 0, "max": 100}
    assert fields["code"].attrs == {"pattern": "^[A-Z]{3}-\\d{3}$"}
    assert fields["topic"].choices == ("bug", "idea", "praise", "question")
    assert fields["areas"].choices == ("chat", "tools", "admin", "mcp")
    assert fields["contact"].default == "email"


def test_browser_values_are_coerced_for_validation() -> None:
    fields = form_fields(SCHEMA)
    raw = {
        "name": "Ada",
        "subscribe": "true",
        "areas": "chat",
        "rating": "",
        "code": "",
        "unknown": "dropped",
        "hours_saved": "2.5",
    }
    assert coerce_post(fields, raw) == {
        "name": "Ada",
        "subscribe": True,
        "areas": ["chat"],
        "hours_saved": "2.5",
    }
    assert coerce_post(fields, {"areas": ["chat", "mcp"]})["areas"] == ["chat", "mcp"]
    assert coerce_post(fields, {})["subscribe"] is False


class Scripted:
    def __init__(self, *posts: FormPost) -> None:
        self.posts = list(posts)
        self.pages: list[str] = []

    async def show(self, template: str, context: dict[str, Any], errors: Any) -> FormPost:
        self.pages.append(render_to_string(template, context))
        return self.posts.pop(0)


VALID = {
    "name": "Ada",
    "email": "ada@example.org",
    "visit_date": "2026-11-20",
    "rating": "5",
    "topic": "idea",
    "contact": "phone",
    "areas": ["chat", "mcp"],
    "subscribe": "true",
    "code": "ABC-123",
    "website": "https://example.org",
    "call_back_at": "2026-11-23T09:30",
}


async def test_the_form_renders_validates_and_keeps_what_was_typed() -> None:
    request = ElicitRequest.build(
        ElicitId("send_feedback", "feedback", "c1", 1), Feedback, "Tell us", {}, {}, None
    )
    invalid = {**VALID, "name": "x", "email": "nope", "rating": "9", "code": "abc"}
    surface = Scripted(FormPost("accept", invalid), FormPost("accept", VALID))
    result = await auto_form(request, PluginContext(request, surface))
    assert isinstance(result, Accept)
    assert result.content.rating == 5 and result.content.areas == ["chat", "mcp"]
    assert (
        result.content.subscribe is True and str(result.content.website) == "https://example.org/"
    )
    first, second = surface.pages
    for html in (first,):
        for snippet in (
            'type="email"',
            'type="url"',
            'type="date"',
            'type="datetime-local"',
            'type="number"',
            'type="checkbox"',
            'type="radio"',
            "<select",
            "<textarea",
            'pattern="^[A-Z]{3}-\\d{3}$"',
            'min="1"',
            'max="5"',
            "required",
        ):
            assert snippet in html, snippet
        assert 'value="email" checked' in html  # the default
    for message in (
        "Your name: Enter at least 2 characters",
        "Email: Enter an email address like name@example.com",
        "Rating: Enter a number from 1 to 5",
        "Ticket code: Enter the ticket code like ABC-123",
    ):
        assert message in second, message
    assert "String should" not in second  # pydantic's words stay in the record and the logs
    assert 'value="9"' in second and 'value="phone" checked' in second  # input kept


async def test_a_refused_form_keeps_an_empty_required_select_empty_and_links_its_errors() -> None:
    """Defect 6: after a server-side refusal the required Topic left empty showed (and sent)
    its first choice, "bug". Help and errors are tied to their inputs."""
    request = ElicitRequest.build(
        ElicitId("send_feedback", "feedback", "c2", 1), Feedback, "Tell us", {}, {}, None
    )
    # The browser posts the empty choice of a select as "".
    surface = Scripted(
        FormPost("accept", {**VALID, "topic": "", "name": "x"}), FormPost("cancel", {})
    )
    await auto_form(request, PluginContext(request, surface))
    first, second = surface.pages
    for html in (first, second):
        select = re.search(r'<select id="af-c2-topic"[^>]*>(.*?)</select>', html, re.S)
        assert select is not None
        options = re.findall(r"<option ([^>]*)>", select.group(1))
        assert options[0].startswith('value=""'), options  # the empty choice is there
        assert not any("selected" in o for o in options[1:]), options
    assert re.search(r'<select id="af-c2-topic"[^>]*aria-invalid="true"', second)
    name = re.search(r'<input id="af-c2-name"[^>]*>', second)
    assert name is not None and 'aria-invalid="true"' in name.group(0)
    assert 'aria-describedby="af-c2-name-error"' in name.group(0)
    assert 'id="af-c2-name-error"' in second
    rating = re.search(r'<input id="af-c2-rating"[^>]*>', first)
    assert rating is not None and 'aria-describedby="af-c2-rating-help"' in rating.group(0)
    assert '<p class="help" id="af-c2-rating-help">' in first
