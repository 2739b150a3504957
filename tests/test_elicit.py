"""Elicitation values: ids, results and validation."""

from __future__ import annotations

from typing import Any

import pytest

from chatbridge import Accept, Cancel, Decline, ElicitId, ElicitResult, ElicitValidationError
from chatbridge.author.elicit import result_from_dict, result_to_dict, validate_result
from tests.support import PickHotel, Rating


def test_elicit_id_string_form_is_stable_and_parses_back() -> None:
    eid = ElicitId("book_flight", "pick_seat", "call:abc:9", 2)
    assert str(eid) == "book_flight:pick_seat:call:abc:9:2"
    assert ElicitId.parse(str(eid)) == eid
    assert ElicitId.parse(eid) is eid


@pytest.mark.parametrize("bad", ["", "a:b", "a:b:c", "a:b:c:0", "a:b:c:x", ":b:c:1", "a::c:1"])
def test_malformed_elicit_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="expected 'tool_name:key:call_id:seq'"):
        ElicitId.parse(bad)


def test_results_have_action_accepted_and_content() -> None:
    accept = Accept(PickHotel(hotel="Inn"))
    assert (accept.action, accept.accepted, accept.content) == (
        "accept",
        True,
        PickHotel(hotel="Inn"),
    )
    assert (Decline().action, Decline().accepted, Decline().content) == ("decline", False, None)
    assert (Cancel().action, Cancel().accepted, Cancel().content) == ("cancel", False, None)


def test_results_round_trip_through_their_json_form() -> None:
    cases: list[tuple[ElicitResult[Any], dict[str, Any]]] = [
        (Accept(PickHotel(hotel="Inn")), {"action": "accept", "content": {"hotel": "Inn"}}),
        (Decline(), {"action": "decline"}),
        (Cancel(), {"action": "cancel"}),
    ]
    for result, data in cases:
        assert result_to_dict(result) == data
    assert result_from_dict({"action": "accept", "content": {"hotel": "Inn"}}) == Accept(
        {"hotel": "Inn"}
    )
    assert result_from_dict({"action": "accept"}) == Accept({})
    with pytest.raises(ValueError, match="accept content must be an object, got list"):
        result_from_dict({"action": "accept", "content": [1]})


def test_validation_turns_dicts_into_models_and_revalidates_models() -> None:
    assert validate_result(Accept({"stars": "4"}), Rating, "t:rate:c:1") == Accept(Rating(stars=4))
    sneaky = Rating.model_construct(stars=99)  # built without validation
    with pytest.raises(ElicitValidationError) as info:
        validate_result(Accept(sneaky), Rating, "t:rate:c:1")
    assert info.value.errors[0]["loc"] == ("stars",)
    assert validate_result(Decline(), Rating, "x") == Decline()


def test_validation_error_lists_every_field() -> None:
    with pytest.raises(ElicitValidationError) as info:
        validate_result(Accept({}), PickHotel, "t:pick_hotel:c:1")
    assert str(info.value) == (
        "Answer to t:pick_hotel:c:1 does not match PickHotel: hotel: Field required. "
        "The elicitation is still pending; answer it again with valid content."
    )


def test_a_handler_returning_something_else_is_a_type_error() -> None:
    with pytest.raises(
        TypeError, match="must return Accept\\(...\\), Decline\\(\\) or Cancel\\(\\); got dict"
    ):
        validate_result({"action": "accept"}, PickHotel, "x")  # type: ignore[arg-type]
