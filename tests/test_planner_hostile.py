"""The offline planner on hostile text: linear time, whatever a visitor types.

``plan_reply`` runs synchronously on the server's event loop, so a slow reply freezes every
socket, HTTP request and MCP call of the process. The regular expressions it used to parse
messages with backtracked cubically on runs of whitespace: ``"origin:"``, 700 spaces and
``"a\\nb"`` took 9 s of CPU, and the chat composer allows 4,000 characters. These tests bound the
CPU time (``time.thread_time()``: other processes do not count) of a reply to text up to that
limit, for the worst cases found and for hypothesis-built text of separators, keywords, stop
words and every kind of whitespace, and of a reply to a long conversation; then they pin what
the reader understands, as before and where it changed. ``CHATBRIDGE_FUZZ_EXAMPLES`` sets how
many examples the property tests draw.
"""

from __future__ import annotations

import gc
import json
import math
import operator
import os
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatbridge.engine.protocol import MAX_USER_MESSAGE
from chatbridge.llm.planner import Reply, plan_reply
from plugins.book_flight.tool import book_flight
from plugins.choose_color.tool import choose_color
from plugins.feedback.tool import send_feedback
from plugins.pick_card.tool import pick_card

EXAMPLES = int(os.environ.get("CHATBRIDGE_FUZZ_EXAMPLES", "150"))
# Per reply to 4,000 characters. The regular expressions needed up to half an hour of CPU for
# the texts below; the token reader needs about a millisecond at most.
BUDGET = 0.05

BOOK_FLIGHT = book_flight.function_spec()


def spec(name: str, properties: dict[str, str]) -> dict[str, Any]:
    """A tool spec whose parameters have the given JSON Schema types."""
    schema = {key: {"type": kind} for key, kind in properties.items()}
    return {"type": "function", "function": {"name": name, "parameters": {"properties": schema}}}


# Labels with spaces, every coerced type, and names that are also the parser's keywords.
PLAN_TRIP = spec(
    "plan_trip",
    {
        "origin_city": "string",
        "destination_city": "string",
        "departure_date": "string",
        "travellers": "integer",
        "budget_usd": "number",
        "window_seat": "boolean",
        "to": "string",
        "is": "string",
        "for": "string",
    },
)
TOOLS = [
    BOOK_FLIGHT,
    choose_color.function_spec(),
    pick_card.function_spec(),
    send_feedback.function_spec(),
    PLAN_TRIP,
]
ALL_TOOL_NAMES = "book flight, choose colour, pick card, send feedback, plan trip: "


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def timed(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, enough: float = 0
) -> tuple[float, Reply]:
    """The planner's reply, and the least CPU time this thread spent on it in three runs, or in
    fewer if one took less than ``enough``.

    A run can be stalled by the cache another process left, or by a garbage collection (not
    counted: it scans every object of the process, not the planner's work); a parser that is
    too slow is slow in every run.
    """
    best = math.inf
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in range(3):
            start = time.thread_time()
            reply = plan_reply(messages, tools)
            best = min(best, time.thread_time() - start)
            if best < enough:
                break
    finally:
        if collecting:
            gc.enable()
    return best, reply


def quick(text: str, tools: list[dict[str, Any]] | None = None, budget: float = BUDGET) -> Reply:
    """The reply to ``text``, checked to be within the limit and to take less than ``budget``."""
    assert len(text) <= MAX_USER_MESSAGE
    seconds, reply = timed([user(text)], tools, enough=budget)
    assert seconds < budget, f"{seconds:.3f} s of CPU for {len(text)} characters"
    return reply


def fill(head: str, unit: str, tail: str = "") -> str:
    """``head``, as many ``unit`` as fit, and ``tail``: up to the composer's limit."""
    return head + unit * ((MAX_USER_MESSAGE - len(head) - len(tail)) // len(unit)) + tail


def arguments(reply: Reply) -> dict[str, Any]:
    [call] = reply.tool_calls
    return call.arguments


@pytest.mark.budget
def test_a_long_run_of_spaces_after_a_separator_is_read_quickly() -> None:
    text = "book flight origin:" + " " * 700 + "a\nb"
    seconds, _ = timed([user(text)], [BOOK_FLIGHT], enough=BUDGET)
    assert seconds < BUDGET, f"{seconds:.2f} s of CPU for {len(text)} characters"


# The worst cases found, at the composer's limit. The comments give the CPU time the regular
# expressions took for the same text: measured, or for the cubic ones measured on a shorter text.


@pytest.mark.budget
def test_spaces_after_a_colon_up_to_the_limit_are_quick_and_the_value_ends_at_the_line() -> None:
    # The regular expressions: 1,699 s (28 minutes) of CPU; cubic (1.7 s for 400 spaces).
    reply = quick(fill("book flight origin:", " ", "a\nb"), [BOOK_FLIGHT])
    assert reply.text.startswith("I can book flight for you, but I need the destination.")
    text = fill("book flight origin:", " ", "ord\ndestination: LAX")
    assert arguments(quick(text, [BOOK_FLIGHT])) == {"origin": "ORD", "destination": "LAX"}


@pytest.mark.budget
def test_spaces_after_is_up_to_the_limit_are_quick() -> None:
    # Cubic: 26 s for 1,000 characters, so about 28 minutes for 4,000.
    reply = quick(fill("book flight origin is", " ", "a\nb"), [BOOK_FLIGHT])
    assert "I need the destination." in reply.text


@pytest.mark.budget
def test_tabs_and_unicode_spaces_after_a_separator_are_quick() -> None:
    # Cubic: 1.4 s for 424 characters, so about 20 minutes for 4,000.
    text = fill("book flight destination =", "\t\u00a0\u2003\u3000 \x0b", "a\nb")
    assert "I need the origin." in quick(text, [BOOK_FLIGHT]).text


@pytest.mark.budget
def test_many_separators_then_a_long_run_of_spaces_are_quick() -> None:
    # Cubic: 174 s.
    head = "book flight " + "origin: " * 120 + "x"
    text = fill(head, " ", "\ny")
    reply = quick(text, [BOOK_FLIGHT])
    assert reply.text.startswith("I can book flight for you, but I need the destination.")


@pytest.mark.budget
def test_many_froms_then_a_long_run_of_spaces_are_quick() -> None:
    # Cubic: 6.5 s; every "from" searched the whole run for " to ".
    reply = quick(fill("book flight " + "from " * 260 + "x", " ", "y"), [BOOK_FLIGHT])
    assert "I need the origin and destination." in reply.text


@pytest.mark.budget
def test_a_long_run_of_spaces_in_the_destination_is_quick() -> None:
    # Quadratic: 0.64 s; each space looked ahead over the rest of the run for a stop word.
    text = fill("book flight from a to b", " ", "c")
    assert arguments(quick(text, [BOOK_FLIGHT])) == {"origin": "a", "destination": "b c"}


@pytest.mark.budget
def test_long_runs_of_spaces_around_to_are_quick() -> None:
    # Quadratic: 0.07 s.
    text = "book flight from a" + " " * 1990 + "to"
    text = fill(text, " ", ",")
    assert "I need the origin and destination." in quick(text, [BOOK_FLIGHT]).text


@pytest.mark.budget
def test_repeated_name_value_pairs_without_an_end_are_quick() -> None:
    # Quadratic: 0.18 s; each "origin:" read on to the line break.
    text = fill("book flight ", "origin: a ", "\nb")
    reply = quick(text, [BOOK_FLIGHT])
    assert "I need the destination." in reply.text


@pytest.mark.budget
def test_repeated_from_and_to_are_quick() -> None:
    # Quadratic, but within the budget: 0.03 s.
    assert "I need the" in quick(fill("book flight ", "from "), [BOOK_FLIGHT]).text
    reply = quick(fill("book flight ", "from a to "), [BOOK_FLIGHT])
    assert arguments(reply)["origin"] == "a"


@pytest.mark.budget
def test_a_label_with_spaces_and_keyword_parameters_are_quick() -> None:
    # Cubic: 0.9 s for 428 characters, so about 12 minutes for 4,000.
    for head in ("plan trip departure date:", "plan trip to =", "plan trip is is", "plan trip for"):
        quick(fill(head, " \t", "x\ny"), TOOLS)
    reply = quick(fill("plan trip travellers: 3, window seat is yes, ", "is to for ", ""), TOOLS)
    # "for is to": the parameter named "for" is "to"; the other keywords match nothing.
    assert reply.tool_calls[0].arguments == {"travellers": 3, "window_seat": True, "for": "to"}


@pytest.mark.budget
def test_sampling_hostile_prompts_is_quick() -> None:
    # These expressions were linear already; the rewrite must keep them so.
    for text in (
        fill("tip ", "for "),
        fill("tip for", " ", "x"),
        fill("tip for", "\n", "x"),
        fill("tip for", " \n"),
        fill("summarise: ", " ", "a. b"),
        fill("summarise: ", ". "),
        fill("", "for \u3000."),
    ):
        quick(text)
        quick(text, TOOLS)


@pytest.mark.budget
def test_a_message_that_names_every_tool_is_quick() -> None:
    quick(fill(ALL_TOOL_NAMES, "from origin: is = to "), TOOLS)
    quick(fill(ALL_TOOL_NAMES, " "), TOOLS)


# The tools' parameter names and labels, and the parser's own keywords.
KEYS = [
    "origin", "Origin", "destination", "DESTINATION", "from", "From", "to", "TO", "is", "for",
    "default color", "theme", "count", "origin city", "destination_city", "departure date",
    "travellers", "budget_usd", "window seat",
]  # fmt: skip
WORDS = [
    "on", "at", "with", "in", "by", "tomorrow", "today", "and", "please", "book", "flight",
    "choose", "colour", "pick", "card", "plan", "trip", "tip", "summarise", "JFK", "lax",
    "San Francisco", "x", "3", "yes", "é", "İ", "ß",
]  # fmt: skip
PUNCTUATION = [":", "=", ",", ".", ";", "!", "?", "'", '"', "-", "#", "_", "(", "\\"]
BLANKS = [" ", "\t", "\u00a0", "\u2003", "\u3000"]
LINE_BREAKS = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"]
PREFIXES = ["", "book flight ", "plan trip ", ALL_TOOL_NAMES]


def hostile_texts(limit: int) -> st.SearchStrategy[str]:
    """Clauses like ``origin :``, a run of whitespace, ``x`` and a line break, and noise between
    them, up to ``limit`` characters; sometimes repeated up to the limit. The worst cases of a
    parser of ``name: value`` and ``from … to …`` are long runs and periodic text.
    """
    blank = st.sampled_from(BLANKS)
    mixed = st.lists(blank | st.sampled_from(LINE_BREAKS), min_size=1, max_size=3).map("".join)
    long = st.integers(1, limit)
    gap = st.sampled_from(["", " "]) | st.builds(operator.mul, blank | mixed, long)
    value = st.sampled_from(KEYS + WORDS + PUNCTUATION + LINE_BREAKS)
    end = st.sampled_from(["", ",", ".", "!", "\n", "\r\n", "\u2028", "\x85", "on", "and", "x"])
    separator = st.sampled_from([":", "=", "is", ": =", "is :", "to"])
    clause = st.tuples(st.sampled_from(KEYS), gap, separator, gap, value, gap, end).map(list)
    noise = st.tuples(value | gap).map(list)
    prefix = st.just(ALL_TOOL_NAMES) | st.sampled_from(PREFIXES)

    @st.composite
    def text(draw: st.DrawFn) -> str:
        parts = [draw(prefix)]
        for _ in range(draw(st.integers(0, 6))):
            parts += draw(clause | noise)
        if draw(st.booleans()):  # the same clauses again and again
            body = parts[1:]
            parts += body * (limit // max(sum(map(len, body)), 1))
        # Too long: shorten the longest part, not the end, so that what follows a run stays.
        while (excess := sum(map(len, parts)) - limit) > 0:
            longest = max(range(len(parts)), key=lambda i: len(parts[i]))
            parts[longest] = parts[longest][: max(0, len(parts[longest]) - excess)]
        return "".join(parts)

    return text()


hostile_text = hostile_texts(MAX_USER_MESSAGE)
fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,  # the test measures CPU time itself; wall time depends on the machine's load
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.budget
@fuzz
@given(hostile_text)
def test_any_message_gets_a_reply_within_the_budget(text: str) -> None:
    for tools in ([BOOK_FLIGHT], TOOLS):
        reply = quick(text, tools)
        for call in reply.tool_calls:
            json.dumps(call.arguments)  # what the offline provider sends on


@pytest.mark.budget
@fuzz
@given(hostile_text, st.sampled_from(["", "One short tip ", "Summarise: ", "Summarize this "]))
def test_any_prompt_is_sampled_within_the_budget(text: str, ask: str) -> None:
    reply = quick((ask + text)[:MAX_USER_MESSAGE])
    assert reply.text and not reply.tool_calls


@pytest.mark.budget
def test_text_ten_times_the_limit_takes_about_ten_times_as_long() -> None:
    # Sampling prompts come from tools, not from the composer: nothing limits their size.
    many = 10 * MAX_USER_MESSAGE
    for text in (
        "book flight origin:" + " " * many + "a\nb",
        "book flight " + "from " * (many // 10) + "x" + " " * (many // 2) + "y",
        ALL_TOOL_NAMES + "origin: a from b to " * (many // 20),
        "tip " + "for " * (many // 4),
    ):
        for tools in (TOOLS, None):
            seconds, _ = timed([user(text)], tools, enough=10 * BUDGET)
            assert seconds < 10 * BUDGET, f"{seconds:.3f} s of CPU for {len(text)} characters"


def conversation(rounds: int, text: str) -> list[dict[str, Any]]:
    """``rounds`` of hostile text from the user, a tool call with it and a result with it."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": text}]
    for i in range(rounds):
        # The first call's arguments are nested too deeply for the JSON decoder.
        arguments = json.dumps({"origin": text, "destination": text}) if i else "[" * len(text)
        call = {"name": "book_flight", "arguments": arguments}
        messages += [
            user(text),
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [{"id": f"call_{i}", "type": "function", "function": call}],
            },
            {"role": "tool", "tool_call_id": f"call_{i}", "content": json.dumps({"note": text})},
        ]
    return messages


@pytest.mark.budget
@pytest.mark.parametrize(
    "last",
    [
        user(fill("book flight origin:", " ", "a\nb")),
        user(ALL_TOOL_NAMES + "from JFK to LAX, travellers: 2, count: 3"),
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"text": " " * 3990})},
        {"role": "tool", "tool_call_id": "call_1", "content": "Error: session was lost " * 160},
        {"role": "tool", "tool_call_id": "call_0", "content": "[" * MAX_USER_MESSAGE},
    ],
    ids=["user", "every tool called", "tool result", "lost session", "nested JSON"],
)
def test_a_long_conversation_takes_time_in_proportion_to_its_size(last: dict[str, Any]) -> None:
    text = fill("book flight from ", "origin: to from ")
    small, large = conversation(10, text) + [last], conversation(100, text) + [last]
    for tools in (TOOLS, None):
        seconds, reply = timed(large, tools)
        assert reply.text or reply.tool_calls
        assert seconds < 1.0, f"{seconds:.2f} s for {len(json.dumps(large))} characters"
        # Ten times the conversation, at most about ten times the time (and some slack).
        base, _ = timed(small, tools)
        assert seconds < 30 * base + BUDGET, (base, seconds)


def test_a_tool_result_nested_too_deeply_for_json_is_summarised_as_text() -> None:
    convo = conversation(1, "book flight from JFK to LAX")
    convo.append({"role": "tool", "tool_call_id": "call_0", "content": "[" * 5000})
    assert plan_reply(convo, TOOLS).text == "Here is what booking the flight gave: " + "[" * 300


# What the reader understands: kept from the regular expressions, or changed on purpose.


ROUTES = [
    ("Book a flight from JFK to LAX", "JFK", "LAX"),
    ("book flights from jfk to San Francisco tomorrow", "JFK", "San Francisco"),
    ("book flight FROM Rome TO New York on Monday", "Rome", "New York"),
    ("book a flight from 'JFK' to \"LAX\" please", "JFK", "LAX"),
    ("book a flight origin: BOS, destination = sfo", "BOS", "SFO"),
    ("book a flight; Origin is Paris and destination is Rome", "Paris", "Rome"),
    ("book a flight from Oslo to Bergen at noon, origin: JFK", "JFK", "Bergen"),
    ("book a flight from New York, to Paris from Oslo to Rome!", "Oslo", "Rome"),
    ("book a flight from from to to x", "from", "to x"),
    ("book a flight from toronto to to x", "toronto", "to x"),
    ("book a flight from JFK\nto LAX", "JFK", "LAX"),
]


@pytest.mark.parametrize(("text", "origin", "destination"), ROUTES)
def test_routes_and_named_values_are_read_as_before(
    text: str, origin: str, destination: str
) -> None:
    expected = {"origin": origin, "destination": destination}
    assert arguments(quick(text, [BOOK_FLIGHT])) == expected


@pytest.mark.parametrize(
    ("text", "origin", "destination"),
    [
        # A value ends at a line break, where it used to match nothing at all.
        ("book a flight origin: JFK\nthanks, destination: LAX", "JFK", "LAX"),
        ("book a flight origin:\n  JFK\ndestination: LAX", "JFK", "LAX"),
        ("book a flight origin: JFK\u2028destination: LAX", "JFK", "LAX"),
        # It used to run on over the line break.
        ("book a flight from JFK to LAX\nThanks!", "JFK", "LAX"),
        # Runs of whitespace in a value are one space; quotes go, and the spaces inside them.
        ("book a flight from San  \t Jose to ' LAX '", "San Jose", "LAX"),
    ],
)
def test_values_end_at_line_breaks_and_have_their_whitespace_collapsed(
    text: str, origin: str, destination: str
) -> None:
    expected = {"origin": origin, "destination": destination}
    assert arguments(quick(text, [BOOK_FLIGHT])) == expected


def test_an_empty_value_is_no_value() -> None:
    # Used to call the tool with origin "" (which its validation then refused).
    reply = quick("book a flight origin: , destination: LAX", [BOOK_FLIGHT])
    assert reply.text.startswith("I can book flight for you, but I need the origin.")
    reply = quick("book a flight origin: '', origin: JFK, destination: LAX", [BOOK_FLIGHT])
    assert arguments(reply) == {"origin": "JFK", "destination": "LAX"}


def test_a_route_does_not_span_lines() -> None:
    reply = quick("book a flight from New\nYork to LAX", [BOOK_FLIGHT])
    assert "I need the origin and destination." in reply.text


def test_labels_types_and_several_tools_in_one_message() -> None:
    # A label's words may now be apart by any whitespace ("departure   date"), not one space.
    # "." ends a value, as before: the budget is 99.
    text = "plan trip: departure   date is 2025-06-01, travellers = 2, budget usd: 99.5 on"
    reply = quick(text + " the\twindow seat: yes. Also pick card, count: 3", TOOLS)
    card, trip = reply.tool_calls
    assert (card.name, card.arguments) == ("pick_card", {"count": 3})
    assert (trip.name, trip.arguments) == (
        "plan_trip",
        {"departure_date": "2025-06-01", "travellers": 2, "budget_usd": 99.0, "window_seat": True},
    )


def test_call_ids_are_unchanged() -> None:
    reply = plan_reply(
        [user("Book a flight from JFK to LAX and pick a card")],
        [BOOK_FLIGHT, pick_card.function_spec()],
    )
    assert [c.id for c in reply.tool_calls] == [
        "call_71527289de7a7f4e5d24e949",
        "call_bbfada3a4252d323faa1bb10",
    ]


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("One short travel tip for LAX airport.", "LAX airport"),
        ("A tip for\n  JFK  Terminal 4 ! more", "JFK Terminal 4"),  # whitespace collapsed
        # A "for" with nothing after it no longer makes the subject empty.
        ("tip for  . and for Oslo", "Oslo"),
        ("tip for  .", "your trip"),
    ],
)
def test_the_sampled_tip_is_about_what_follows_for(prompt: str, expected: str) -> None:
    assert f" {expected}" in quick(prompt).text


def test_a_summary_is_the_first_sentence_after_the_colon() -> None:
    assert quick("Summarize: The flight is late. Gate changed.").text == (
        "In short: The flight is late."
    )
    assert quick("summarise this:   It is late!Really? Yes").text == "In short: It is late!Really?"
