"""Words for people (issue 15): validation errors, chat errors, values, badges, and what the
offline model says after a call a person stopped. Exact messages: these are what people read."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest
from django.template.loader import render_to_string
from pydantic import BaseModel, Field, field_validator

from chatbridge import create_mcp_tool
from chatbridge.author.elicit import Accept, validate_result
from chatbridge.author.exceptions import (
    ElicitValidationError,
    ToolDefinitionError,
    field_errors_text,
    refusal_text,
    technical_errors,
)
from chatbridge.author.guest_ui import schema_errors
from chatbridge.author.human import human_value
from chatbridge.calls.outcome import (
    Aborted,
    Cancelled,
    Completed,
    Declined,
    Denied,
    Failed,
    Outcome,
    call_status,
    completed,
    describe,
)
from chatbridge.chat.chat_errors import chat_error_text
from chatbridge.chat.rendering import ToolCallView, render_result
from chatbridge.chat.templatetags.chatbridge_tags import human, human_items
from chatbridge.engine.protocol import LogLine
from chatbridge.engine.tool_message import tool_message
from chatbridge.llm.planner import plan_reply
from chatbridge.testing import run_tool
from plugins.choose_color.tool import ColorChoice
from plugins.feedback.tool import Feedback


def refused(model: type[BaseModel], content: dict[str, Any]) -> ElicitValidationError:
    with pytest.raises(ElicitValidationError) as info:
        validate_result(Accept(content), model, "t:k:c:1")
    return info.value


def test_pydantic_errors_are_worded_from_the_field_and_the_error_kind() -> None:
    exc = refused(
        Feedback,
        {
            "name": "a",
            "email": "not-an-address",
            "website": "nope",
            "visit_date": "soon",
            "rating": 9,
            "hours_saved": "lots",
            "topic": "rant",
            "subscribe": "maybe",
            "code": "abc",
        },
    )
    assert exc.field_errors() == {
        "name": ["Enter at least 2 characters"],
        "email": ["Enter an email address like name@example.com"],
        "website": ["Enter a web address, like https://example.com"],
        "visit_date": ["Enter a date, like 2026-05-31"],
        "rating": ["Enter a number from 1 to 5"],
        "hours_saved": ["Enter a number from 0 to 100"],
        "topic": ["Choose one of: bug, idea, praise or question"],
        "subscribe": ["Choose yes or no"],
        "code": ["Enter the ticket code like ABC-123"],
    }
    # The exact technical text stays: in the exception (logs) and for the record (the admin).
    assert "String should match pattern '^[^@\\s]+@" in str(exc)
    assert technical_errors(exc.field_errors())["email"] == [
        "String should match pattern '^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$'"
    ]


def test_the_refusal_every_transport_shows_is_written_for_a_person() -> None:
    exc = refused(ColorChoice, {"color": "#12345G"})
    assert refusal_text(field_errors_text(exc.field_errors())) == (
        "Your previous answer was not accepted. Color: Enter a colour as # and six hex digits, "
        "like #1a2b3c. Please try again."
    )
    missing = refused(Feedback, {})
    assert field_errors_text(missing.field_errors()).startswith(
        "Your name: This field is required; Email: This field is required"
    )


def test_jsonschema_errors_get_the_same_words() -> None:
    schema = ColorChoice.model_json_schema()
    assert schema_errors(schema, {"color": "#12345G"}) == {
        "color": ["Enter a colour as # and six hex digits, like #1a2b3c"]
    }
    assert schema_errors(schema, {"color": "#123456", "name": "x" * 41}) == {
        "name": ["Use at most 40 characters"]
    }


class Pick(BaseModel):
    n: int = Field(ge=1)
    word: str = ""

    @field_validator("word")
    @classmethod
    def _known(cls, word: str) -> str:
        if word and word != "yes":
            raise ValueError("Say yes, or leave it empty.")
        return word


def test_bounds_and_an_answer_rule_in_words() -> None:
    exc = refused(Pick, {"n": 0, "word": "no"})
    assert exc.field_errors() == {"n": ["Enter 1 or more"], "word": ["Say yes, or leave it empty."]}


def test_chat_errors_are_written_for_people() -> None:
    assert chat_error_text("INTERNAL_ERROR", "KeyError: 'x'") == (
        "Something went wrong on the server. Please try again."
    )
    assert chat_error_text("LLM_ERROR", "The model failed: APIConnectionError(...)") == (
        "The assistant could not reply just now. Please try again in a moment."
    )
    busy = "Please wait for the current reply, or abort the running tool."
    assert chat_error_text("BUSY", busy) == busy  # already written for people


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "—"),
        (True, "Yes"),
        (False, "No"),
        (["chat"], "chat"),
        (["chat", "tools", "mcp"], "chat, tools and mcp"),
        ("2026-05-31", "31 May 2026"),
        ("2026-05-31T14:30:00", "31 May 2026, 14:30"),
        (date(2026, 1, 2), "2 January 2026"),
        ({"last4": "4242", "note": None}, "Last4: 4242"),
        (3.0, "3"),
        ("plain words", "plain words"),
    ],
)
def test_values_are_shown_as_people_write_them(value: Any, shown: str) -> None:
    assert human_value(value) == shown


def test_money_where_the_schema_or_the_name_says_so() -> None:
    assert human(1234.5, "USD") == "$1,234.50"
    assert human_value(99, {"format": "money", "x-currency": "EUR"}) == "€99.00"
    assert dict(human_items({"price_usd": 249, "website": None, "areas": []})) == {
        "Price usd": "$249.00"
    }


def test_a_feedback_result_is_a_definition_list_not_a_dict() -> None:
    result = {
        "received": True,
        "reference": "FB-1A2B3C",
        "website": None,
        "areas": ["chat", "admin"],
        "subscribe": False,
        "visit_date": "2026-05-31",
    }
    call = ToolCallView("c1", "send_feedback", {}, "completed", result)
    html = str(render_result(call))
    for text in (
        "<dt>Received</dt><dd>Yes</dd>",
        "<dt>Areas</dt><dd>chat and admin</dd>",
        "<dt>Subscribe</dt><dd>No</dd>",
        "<dt>Visit date</dt><dd>31 May 2026</dd>",
    ):
        assert text in html, text
    for python in ("{", "None", "True", "False", "['"):
        assert python not in html, python


def test_arguments_and_answers_are_shown_in_words() -> None:
    call = ToolCallView("c1", "book_flight", {"origin": "JFK", "return": None, "flex": True})
    assert call.arguments_text == "Origin: JFK; Flex: Yes"
    html = render_to_string(
        "chatbridge/elicit_done.html",
        {
            "event": type(
                "E",
                (),
                {
                    "call_id": "c1",
                    "action": "accept",
                    "note": "",
                    "content": {"areas": ["chat", "tools"], "website": None, "subscribe": True},
                },
            )()
        },
    )
    assert "Answered · Areas: chat and tools · Subscribe: Yes</p>" in html
    assert "None" not in html


@pytest.mark.parametrize(
    ("outcome", "badge", "words"),
    [
        (Completed(result={"booked": True}), "Done", ""),
        (
            Declined(key="pick_seat", result={"booked": False, "reason": "seat declined"}),
            "Declined",
            "Not done: the question was declined.",
        ),
        (
            Cancelled(key="pick_seat", result={"received": False, "reason": "cancel"}),
            "Cancelled",
            "Not done: the question was cancelled.",
        ),
        (
            Completed(result={"booked": False, "reason": "booking not confirmed"}, done=False),
            "Not done",
            "Not done: booking not confirmed.",
        ),
        (
            Aborted(by="user", reason="aborted by the user"),
            "Stopped by you",
            "You stopped this before it finished.",
        ),
        (
            Aborted(by="operator", who="ops", reason="maintenance"),
            "Stopped by an operator",
            "An operator stopped this: maintenance",
        ),
        (Denied(reason="not today"), "Denied", "You did not allow this to run: not today"),
        (
            Failed(error_type="KeyError", message="'seat'"),
            "Failed",
            "Something went wrong on our side, so this did not finish. You can ask again.",
        ),
    ],
)
def test_badges_match_what_happened(outcome: Outcome, badge: str, words: str) -> None:
    call = ToolCallView("c1", "look_up", {}, call_status(outcome), ended=outcome)
    if isinstance(outcome, Completed | Declined | Cancelled):
        call.result = outcome.result
    else:
        call.error = describe(outcome)
    assert call.badge == badge
    status_html = render_to_string("chatbridge/tool_status.html", {"call": call})
    assert f">{badge}</span>" in status_html
    assert words in str(render_result(call))
    assert "KeyError" not in str(render_result(call))


async def test_only_the_field_a_tool_declares_says_it_did_not_do_its_job() -> None:
    not_booked = {"booked": False, "reason": "no seat was free"}

    async def book(params: BaseModel, ctx: object) -> dict[str, Any]:
        return not_booked

    declared = create_mcp_tool("declared").elicits().done_when("booked").execute(book)
    run = await run_tool(declared)
    assert run.outcome == Completed(result=not_booked, done=False)
    call = ToolCallView("c1", "declared", {}, run.status, run.result, ended=run.outcome)
    assert (call.badge, "Not done: no seat was free." in str(render_result(call))) == (
        "Not done",
        True,
    )
    # Without the declaration nothing is guessed from the result's fields: the tool returned.
    silent = await run_tool(create_mcp_tool("silent").elicits().execute(book))
    assert silent.outcome == Completed(result=not_booked, done=True)
    assert ToolCallView("c2", "silent", {}, silent.status, ended=silent.outcome).badge == "Done"
    # A declared field the result lacks (or holds true) is not a "no".
    assert completed({"reason": "x"}, [], "booked") == Completed(result={"reason": "x"})
    with pytest.raises(ToolDefinitionError, match=r"\.done_when\(\) takes the name"):
        create_mcp_tool("bad").done_when("not a field")


def tool_turn(content: str) -> list[dict[str, Any]]:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "book_flight", "arguments": json.dumps({"origin": "JFK"})},
    }
    return [
        {"role": "user", "content": "Book a flight from JFK to LAX"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": content},
    ]


TOOLS = [{"type": "function", "function": {"name": "book_flight", "parameters": {}}}]


def test_the_model_is_told_the_truth_about_a_stop_or_a_denial() -> None:
    mine = tool_message(Aborted(by="user", reason="aborted by the user"))
    assert mine == (
        "Stopped by the user: the user stopped this tool call themselves. "
        "Do not retry unless they ask."
    )
    reply = plan_reply(tool_turn(mine), TOOLS)
    assert (reply.text, reply.tool_calls) == (
        "OK, I stopped booking the flight as you asked. Tell me if you want to start again.",
        [],
    )
    denied = tool_message(Denied(reason="too pricey"))
    assert denied == (
        "Denied by the user: the user did not allow this tool call (their reason: too pricey). "
        "Do not retry unless they ask."
    )
    reply = plan_reply(tool_turn(denied), TOOLS)
    assert reply.text == (
        "OK, I did not book the flight, as you asked. Tell me if you change your mind."
    )


def test_an_operators_abort_is_never_undone_whatever_its_reason_says() -> None:
    stopped = tool_message(
        Aborted(by="operator", who="ops", reason="session was lost, please retry")
    )
    reply = plan_reply(tool_turn(stopped), TOOLS)
    assert reply.tool_calls == []
    assert reply.text == (
        "An operator stopped booking the flight (their reason: session was lost, please retry). "
        "I won't start it again by myself; ask me if you still need it."
    )
    # A person's words in any other error do not start the call again either; only the
    # system's own marker of a lost session does.
    reply = plan_reply(tool_turn("Error: The tool call was aborted: please retry"), TOOLS)
    assert reply.tool_calls == []
    lost = plan_reply(
        tool_turn("Error: Plugin session was lost. Please retry the operation."), TOOLS
    )
    assert [c.name for c in lost.tool_calls] == ["book_flight"]


def test_log_data_in_words() -> None:
    log = LogLine(
        call_id="c1", level="info", message="Booked", data={"ticket": "T-1", "ok": True, "x": None}
    )
    html = render_to_string("chatbridge/log_line.html", {"log": log})
    assert '<span class="log-data">Ticket: T-1; Ok: Yes</span>' in html
    assert "None" not in html and "True" not in html
