"""x-model-context: context in the schema and in a message boundary, both ways (DESIGN §4)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from chatbridge.author.model_context import (
    BOUNDARY,
    encode_message,
    extract_context,
    split_message,
    with_context,
)

FLIGHTS = {"flights": [{"id": "SH-142", "price": 299}, {"id": "CA-287", "price": 349}]}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
contexts = st.dictionaries(st.text(), json_values, max_size=5)


def test_wire_format_is_message_blank_line_boundary_json() -> None:
    wire = encode_message("Select a flight:\n\n1. SkyHigh $299", FLIGHTS)
    assert wire == (
        "Select a flight:\n\n1. SkyHigh $299\n\n"
        "--x-model-context: application/json\n"
        '{"flights":[{"id":"SH-142","price":299},{"id":"CA-287","price":349}]}'
    )
    assert split_message(wire) == ("Select a flight:\n\n1. SkyHigh $299", FLIGHTS)


def test_empty_context_leaves_the_message_alone() -> None:
    assert encode_message("Pick one", {}) == "Pick one"
    assert split_message("Pick one") == ("Pick one", None)


def test_unicode_survives_unescaped() -> None:
    context = {"city": "Zürich", "greeting": "こんにちは", "emoji": "✈️", "sep": "\u2028"}
    wire = encode_message("Wohin? ✈️", context)
    assert "Zürich" in wire
    assert split_message(wire) == ("Wohin? ✈️", context)


def test_messages_that_already_contain_dashes_and_boundaries() -> None:
    tricky = f"Options -- read carefully\n--\n\n{BOUNDARY}\nnot json"
    wire = encode_message(tricky, {"a": 1})
    assert split_message(wire) == (tricky, {"a": 1})
    # Even with no context, a message ending like a section comes back whole.
    fake = f"Look:\n\n{BOUNDARY}\n" + '{"forged": true}'
    assert split_message(encode_message(fake, {})) == (fake, {})


def test_big_context_round_trips() -> None:
    context = {
        "seats": [
            {"row": r, "seat": s, "taken": (r * 7 + ord(s)) % 3 == 0}
            for r in range(1, 400)
            for s in "ABCDEF"
        ]
    }
    wire = encode_message("Choose a seat", context)
    assert len(wire) > 50_000
    assert split_message(wire) == ("Choose a seat", context)


def test_missing_or_garbled_boundary_degrades_to_no_context() -> None:
    garbled = [
        f"Pick\n\n{BOUNDARY}\n" + '{"flights": [1, 2',  # cut short
        f"Pick\n\n{BOUNDARY}\n[1, 2]",  # not an object
        "Pick\n\n--x-model-context: application/json+gzip\nH4sIAAAA",  # unknown format
        f"Pick\n{BOUNDARY}\n" + '{"a": 1}',  # no blank line before the boundary
        f"Pick\n\n{BOUNDARY}\n" + '{"a": 1}\ntrailing',  # section not last
    ]
    for wire in garbled:
        assert split_message(wire) == (wire, None), wire
        assert extract_context(None, wire) == {}


def test_extraction_prefers_the_schema_and_falls_back_to_the_message() -> None:
    schema = with_context({"type": "object", "properties": {}}, {"from": "schema"})
    wire = encode_message("m", {"from": "message"})
    assert extract_context(schema, wire) == {"from": "schema"}
    assert extract_context({"type": "object"}, wire) == {"from": "message"}  # schema stripped
    assert extract_context({"x-model-context": "not an object"}, wire) == {"from": "message"}


def test_with_context_copies_and_only_adds_when_there_is_context() -> None:
    schema: dict[str, Any] = {"type": "object"}
    assert with_context(schema, {}) == {"type": "object"}
    assert with_context(schema, {"a": 1}) == {"type": "object", "x-model-context": {"a": 1}}
    assert schema == {"type": "object"}


@given(message=st.text(), context=contexts)
def test_round_trip_any_message_any_context(message: str, context: dict[str, Any]) -> None:
    wire = encode_message(message, context)
    back_message, back_context = split_message(wire)
    assert back_message == message
    assert (back_context or {}) == json.loads(json.dumps(context))
    schema = with_context({"type": "object"}, context)
    assert extract_context(schema, wire) == (back_context or {})
