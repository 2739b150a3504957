"""auto_form: a Django form drawn from the JSON Schema, browser posts read back by its
widgets, the usual validation loop (the model decides, never Django)."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.template.loader import render_to_string

from chatbridge import Accept, ElicitId, ElicitRequest, FormPost, PluginContext, auto_form
from chatbridge.chat.auto_forms import build_form, read_post
from plugins.feedback.tool import Feedback

SCHEMA = Feedback.model_json_schema()


def widgets() -> dict[str, tuple[str, bool]]:
    form = build_form(SCHEMA)
    return {
        name: (type(field.widget).__name__, field.required) for name, field in form.fields.items()
    }


def test_every_field_type_gets_its_django_field_and_widget_in_declaration_order() -> None:
    assert list(widgets().items()) == [
        ("name", ("TextInput", True)),
        ("email", ("EmailInput", True)),
        ("website", ("URLInput", False)),
        ("visit_date", ("DateInput", True)),
        ("call_back_at", ("DateTimeInput", False)),
        ("rating", ("NumberInput", True)),
        ("hours_saved", ("NumberInput", False)),
        ("topic", ("Select", True)),
        ("contact", ("RadioSelect", False)),
        ("areas", ("CheckboxSelectMultiple", False)),
        ("subscribe", ("CheckboxInput", False)),
        ("code", ("TextInput", False)),
        ("comment", ("Textarea", False)),
    ]
    form = build_form(SCHEMA)
    fields = form.fields
    assert fields["name"].label == "Your name"
    assert fields["name"].widget.attrs == {"maxlength": "40", "minlength": "2"}
    assert isinstance(fields["rating"], forms.IntegerField)
    assert fields["rating"].widget.attrs == {"min": 1, "max": 5}
    assert fields["rating"].help_text == "1 (poor) to 5 (great)"
    assert fields["hours_saved"].widget.attrs == {"min": 0, "max": 100, "step": "any"}
    assert fields["code"].widget.attrs == {"pattern": "^[A-Z]{3}-\\d{3}$"}
    topic = fields["topic"]
    assert isinstance(topic, forms.ChoiceField)
    assert [value for value, _ in topic.widget.choices] == ["", "bug", "idea", "praise", "question"]
    areas = fields["areas"]
    assert isinstance(areas, forms.MultipleChoiceField)
    assert [value for value, _ in areas.widget.choices] == ["chat", "tools", "admin", "mcp"]
    assert fields["contact"].initial == "email"
    assert form["visit_date"].as_widget().startswith('<input type="date"')
    assert form["call_back_at"].as_widget().startswith('<input type="datetime-local"')


def test_browser_posts_are_read_by_the_widgets_for_validation() -> None:
    raw = {
        "name": "Ada",
        "subscribe": "on",
        "areas": "chat",
        "rating": "",
        "code": "",
        "unknown": "dropped",
        "hours_saved": "2.5",
    }
    assert read_post(SCHEMA, raw) == {
        "name": "Ada",
        "areas": ["chat"],
        "subscribe": True,
        "hours_saved": "2.5",
    }
    assert read_post(SCHEMA, {"areas": ["chat", "mcp"]})["areas"] == ["chat", "mcp"]
    assert read_post(SCHEMA, {})["subscribe"] is False
    assert read_post(SCHEMA, {"subscribe": "false"})["subscribe"] is False
    assert read_post(SCHEMA, {"name": ""}) == {"name": "", "areas": [], "subscribe": False}


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
        assert re.search(r'<input type="radio" name="contact" value="email"[^>]* checked', html)
    for message in (
        "Your name: Enter at least 2 characters",
        "Email: Enter an email address like name@example.com",
        "Rating: Enter a number from 1 to 5",
        "Ticket code: Enter the ticket code like ABC-123",
    ):
        assert message in second, message
    assert "String should" not in second  # pydantic's words stay in the record and the logs
    assert 'value="9"' in second  # what was typed is kept
    assert re.search(r'<input type="radio" name="contact" value="phone"[^>]* checked', second)


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
        select = re.search(r'<select [^>]*id="af-c2-topic"[^>]*>(.*?)</select>', html, re.S)
        assert select is not None
        options = re.findall(r"<option ([^>]*)>", select.group(1))
        assert options[0].startswith('value=""'), options  # the empty choice is there
        assert not any("selected" in o for o in options[1:]), options
    topic = re.search(r'<select [^>]*id="af-c2-topic"[^>]*>', second)
    assert topic is not None and 'aria-invalid="true"' in topic.group(0)
    name = re.search(r'<input [^>]*id="af-c2-name"[^>]*>', second)
    assert name is not None and 'aria-invalid="true"' in name.group(0)
    assert 'aria-describedby="af-c2-name-error"' in name.group(0)
    assert 'id="af-c2-name-error"' in second
    rating = re.search(r'<input [^>]*id="af-c2-rating"[^>]*>', first)
    assert rating is not None and 'aria-describedby="af-c2-rating-help"' in rating.group(0)
    assert '<p class="help" id="af-c2-rating-help">' in first


def test_a_first_showing_is_drawn_once_per_schema_with_each_calls_ids() -> None:
    """The fields of a question shown for the first time come from one drawing per schema,
    with the call's id put in: the same HTML as a drawing of their own, ids escaped alike."""
    from chatbridge.chat.auto_forms import _drawn, auto_fields

    for call_id in ("call_1", "call_2", "call_<\"&'>"):
        cached = auto_fields(SCHEMA, None, None, call_id)
        assert cached == _drawn(SCHEMA, None, None, call_id)
        assert all("\x00" not in field.widget for field in cached)
    assert f'id="af-call_2-{cached[0].name}"' in auto_fields(SCHEMA, None, None, "call_2")[0].widget
    assert "af-call_&lt;&quot;&amp;&#x27;&gt;-" in cached[0].widget
