"""HTML fragments for the browser: the elicitation card around a plugin's form, tool cards,
and each event as an out-of-band swap on a page in a given state. Text from the model, tools
and users is always escaped."""

from __future__ import annotations

import re

from django.utils import translation

from chatbridge import ElicitId, ElicitRequest
from chatbridge.calls.outcome import Failed, RefusedAnswers
from chatbridge.chat.rendering import SocketView, render_event, render_form
from chatbridge.engine.protocol import (
    AssistantDelta,
    AssistantMessage,
    ErrorEvent,
    LogLine,
    ProgressNote,
    ToolCallEvent,
    UserMessage,
)
from tests.support import PickHotel

HOSTILE = '<img src=x onerror="alert(1)">'


def hotel_request(message: str = "Which hotel?\n\nDetails follow") -> ElicitRequest:
    return ElicitRequest.build(
        ElicitId("plan_trip", "pick_hotel", "call-1", 1), PickHotel, message, {}, {}, None
    )


def test_the_card_shows_the_question_s_headline_and_the_plugin_s_form_escaped() -> None:
    request = hotel_request(f"Pick {HOSTILE}\n\nmore text")
    html = render_form(
        request,
        "chatbridge/auto_form.html",
        {"schema": request.schema.json},
        {},
        session_id="call-1",
    )
    assert HOSTILE not in html and "&lt;img src=x" in html
    assert "more text" not in html.split("<form", 1)[0]  # the headline is the first paragraph
    assert 'name="hotel"' in html
    assert "aria-invalid" not in html  # nothing refused yet


def test_a_refused_post_shows_its_errors_and_the_form_s_own_error() -> None:
    request = hotel_request()
    html = render_form(
        request,
        "chatbridge/auto_form.html",
        {"schema": request.schema.json, "values": {"hotel": HOSTILE}},
        {"hotel": [f"No hotel called {HOSTILE}"], "__all__": ["Try again."]},
        session_id="call-1",
    )
    assert HOSTILE not in html
    assert "Try again." in html
    field = re.search(r"<input [^>]*name=\"hotel\"[^>]*>", html)
    assert field is not None and 'aria-invalid="true"' in field.group(0)
    assert 'value="&lt;img src=x' in field.group(0)  # what was typed is kept, escaped


def test_user_and_assistant_text_is_escaped_and_streamed_into_one_bubble() -> None:
    view = SocketView()
    first = render_event(UserMessage(message_id="u1", content=HOSTILE), view)
    assert first is not None and HOSTILE not in first and "&lt;img" in first
    assert 'hx-swap-oob="innerHTML:#errors"' in first  # a new message clears old errors

    start = render_event(AssistantDelta(message_id="a1", delta="Hello"), view)
    more = render_event(AssistantDelta(message_id="a1", delta=f" {HOSTILE}"), view)
    assert start is not None and 'hx-swap-oob="beforeend:#transcript"' in start
    assert more == (  # the text goes on in the bubble's paragraph, escaped
        '<div hx-swap-oob="beforeend:#msg-a1-tail > :last-child">'
        ' &lt;img src=x onerror="alert(1)"&gt;</div>'
    )
    final = render_event(AssistantMessage(message_id="a1", content="Hello **there**"), view)
    assert final is not None and "beforeend:#transcript" not in final  # replaces the bubble
    assert "<strong>there</strong>" in final  # the final text is Markdown


def test_a_tool_card_appears_once_then_updates_in_place() -> None:
    view = SocketView()
    running = ToolCallEvent(call_id="t1", tool_name="plan_trip", arguments={"city": HOSTILE})
    card = render_event(running, view)
    assert card is not None and 'hx-swap-oob="beforeend:#transcript"' in card
    assert HOSTILE not in card
    again = render_event(running, view)
    assert again is not None and "beforeend:#transcript" not in again
    done = ToolCallEvent(
        call_id="t1", tool_name="plan_trip", status="completed", result={"booked": HOSTILE}
    )
    update = render_event(done, view)
    assert update is not None and HOSTILE not in update and "t1" in update


def test_logs_progress_and_errors_go_to_their_places_in_words() -> None:
    view = SocketView()
    log = render_event(LogLine(call_id="t1", level="info", message=HOSTILE), view)
    assert log is not None and 'hx-swap-oob="beforeend:#tool-t1-log"' in log
    assert HOSTILE not in log
    progress = render_event(ProgressNote(call_id="t1", message="Half", progress=1, total=2), view)
    assert progress is not None and "Half" in progress
    error = render_event(ErrorEvent(code="BAD_JSON", message="Expecting value: col 1"), view)
    assert error is not None and 'hx-swap-oob="innerHTML:#errors"' in error
    assert "Expecting value" not in error  # the exact text is for logs, people get words
    assert "the page sent something the server could not read" in error


def test_a_question_refused_too_often_is_said_on_the_card_in_the_person_s_language() -> None:
    refused = RefusedAnswers(key="pick_seat", count=5, why="Rangée : Saisissez un nombre")
    outcome = Failed(error_type="TooManyRefusedAnswers", message="…", refused=refused)
    event = ToolCallEvent(call_id="t1", tool_name="book_flight", status="failed", outcome=outcome)
    with translation.override("fr"):
        html = render_event(event, SocketView())
    assert html is not None and "Échec" in html
    assert (
        "Non fait\u00a0: votre réponse a été refusée 5 fois, la question a donc été fermée. "
        "Dernier refus\u00a0: Rangée : Saisissez un nombre." in html
    )
    once = Failed(
        error_type="TooManyRefusedAnswers",
        message="…",
        refused=RefusedAnswers(key="pick_seat", count=1, why=""),
    )
    html = render_event(event.model_copy(update={"outcome": once}), SocketView())
    assert (
        html is not None
        and "Not done: your answer was refused, so the question was closed." in html
    )
