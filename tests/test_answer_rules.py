"""A key's rules travel with the tool: every transport refuses the same answers, the same way.

The same bad answers (a malformed card, a card not dealt, an unknown flight, a taken seat) go in
through the chat socket, MCP legacy push, MCP 2026-07-28 ``input_required`` and ``_respond``;
each is refused with the rule's message, asked again, and a valid answer then completes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from pydantic import BaseModel

from chatbridge import Accept, AnswerRefused, ElicitValidationError, SessionManager, answer_rule
from chatbridge.author.model_context import extract_context
from plugins.book_flight.data import search_flights, seat_map_for
from plugins.book_flight.tool import PickFlight, PickSeat
from plugins.pick_card.tool import RANKS, SUITS, PickedCard, pick_card
from tests.chat_client import ChatClient
from tests.pages import pay
from tests.support import until_pause

ROUTE = {"origin": "JFK", "destination": "LAX"}
FLIGHT = search_flights("JFK", "LAX")[0]
SEAT_MAP = seat_map_for(FLIGHT.id)
TAKEN = SEAT_MAP.taken[0]
FREE = SEAT_MAP.first_free() or ""

NOT_A_CARD = "'ZZ' is not a card; codes look like QH or 10S."
NOT_DEALT = "Pick one of the cards on the table."
NOT_OFFERED = "Choose one of the flights listed."
SEAT_TAKEN = f"Seat {TAKEN} is taken; choose another."


def not_dealt(cards: list[dict[str, Any]]) -> str:
    dealt = {card["code"] for card in cards}
    return next(f"{r}{s}" for s in SUITS for r in RANKS if f"{r}{s}" not in dealt)


def answer(card: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"card": card}}


def label(seat: str) -> dict[str, Any]:
    return {"row": int(seat[:-1]), "seat": seat[-1]}


# The rules themselves -------------------------------------------------------------------------


def test_rules_are_skipped_without_a_question() -> None:
    assert PickedCard.model_validate({"card": "KS"}).card == "KS"  # no table to check against
    assert PickFlight.model_validate({"flight_id": "XX-1"}).flight_id == "XX-1"
    assert PickSeat.model_validate(label(TAKEN)).row == int(TAKEN[:-1])
    assert set(PickSeat.model_json_schema()["properties"]) == {"row", "seat"}


def test_a_malformed_card_is_refused_even_without_a_question() -> None:
    with pytest.raises(ValueError) as info:
        PickedCard.model_validate({"card": "ZZ"})
    assert [e["msg"] for e in info.value.errors()] == [NOT_A_CARD]  # type: ignore[attr-defined]


def test_a_refusal_is_shown_as_written() -> None:
    class Wish(BaseModel):
        text: str

        @answer_rule("text")
        def _known(cls, text: str, context: dict[str, Any]) -> None:
            if text not in context["allowed"]:
                raise AnswerRefused(f"Say one of {{{', '.join(context['allowed'])}}}.")

    with pytest.raises(ValueError) as info:
        Wish.model_validate({"text": "cake"}, context={"allowed": ["tea", "pie"]})
    [error] = info.value.errors()  # type: ignore[attr-defined]
    assert (error["loc"], error["msg"]) == (("text",), "Say one of {tea, pie}.")


async def test_a_session_refuses_an_answer_its_rules_refuse_and_keeps_asking(
    manager: SessionManager,
) -> None:
    session = await manager.create(pick_card, {"count": 3}, call_id="rules1")
    [(kind, elicit_id, _)] = await until_pause(session)
    cards = session.pending.context["cards"]
    for card in ("ZZ", not_dealt(cards)):
        with pytest.raises(ElicitValidationError) as info:
            await session.respond_to_elicit(elicit_id, answer(card))
        assert info.value.field_errors() == {"card": [NOT_DEALT]}
        assert str(session.pending.id) == elicit_id  # still asked
    await session.respond_to_elicit(elicit_id, Accept({"card": cards[2]["code"]}))
    assert await until_pause(session) == [("completed", f"You picked the {cards[2]['name']}.")]


# The chat -------------------------------------------------------------------------------------


@pytest.fixture
async def chat(fresh_runtime: None) -> AsyncIterator[ChatClient]:
    client = await ChatClient.start()
    yield client
    await client.close()


@pytest.mark.django_db(transaction=True)
async def test_the_chat_refuses_bad_cards_and_asks_again(chat: ChatClient) -> None:
    await chat.send_user("Pick a card")
    form = await chat.next("elicit", key="__handoff__")
    cards = form["context"]["cards"]
    await chat.answer(form, card="ZZ")
    again = await chat.next("elicit", key="__handoff__")
    assert again["errors"] == {"card": [NOT_DEALT]}
    await chat.answer(again, card=not_dealt(cards))
    again = await chat.next("elicit", key="__handoff__")
    assert again["errors"] == {"card": [NOT_DEALT]}
    assert again["elicit_id"] == form["elicit_id"] and again["attempt"] == 3
    await chat.answer(again, card=cards[0]["code"])
    result = (await chat.next("tool_call", status="completed"))["result"]
    assert result == f"You picked the {cards[0]['name']}."


@pytest.mark.django_db(transaction=True)
async def test_the_chat_refuses_an_unknown_flight_and_a_taken_seat(chat: ChatClient) -> None:
    await chat.send_user("Book a flight from JFK to LAX")
    flights = await chat.next("elicit", key="pick_flight")
    await chat.answer(flights, flight_id="XX-999")
    again = await chat.next("elicit", key="pick_flight")
    assert again["errors"] == {"flight_id": [NOT_OFFERED]}
    await chat.answer(again, flight_id=FLIGHT.id)
    seats = await chat.next("elicit", key="pick_seat")
    await chat.answer(seats, **label(TAKEN))
    again = await chat.next("elicit", key="pick_seat")
    assert again["errors"] == {"seat": [SEAT_TAKEN]}
    await chat.answer(again, **label(FREE))
    await chat.review_and_pay()
    result = (await chat.next("tool_call", status="completed"))["result"]
    assert (result["booked"], result["seat"]) == (True, FREE)


# MCP: legacy push and 2026-07-28 input_required, with the official client ---------------------


class Stubborn:
    """Answers each question with bad answers first, then a good one; keeps what it was told."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.asked: Counter[str] = Counter()  # by the question's context keys

    def answers(self, context: dict[str, Any]) -> list[dict[str, Any]]:
        if "cards" in context:
            cards = context["cards"]
            return [{"card": "ZZ"}, {"card": not_dealt(cards)}, {"card": cards[0]["code"]}]
        if "flights" in context:
            return [{"flight_id": "XX-999"}, {"flight_id": FLIGHT.id}]
        return [label(TAKEN), label(FREE)]

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.messages.append(params.message)
        if params.mode == "url":  # book_flight's payment: paid on its page
            await pay(params.url)
            return types.ElicitResult(action="accept")
        found = extract_context(params.requested_schema, params.message)
        if "price_usd" in found:  # book_flight's review
            return types.ElicitResult(action="accept", content={"confirm": True})
        answers = self.answers(found)
        asked = self.asked[",".join(sorted(found))]
        self.asked[",".join(sorted(found))] += 1
        return types.ElicitResult(action="accept", content=answers[min(asked, len(answers) - 1)])


def refusals(messages: list[str]) -> list[str]:
    """What each question said about the previous answer, in order ('' for a first ask)."""
    notes = []
    for message in messages:
        head = message.split("\n\n--x-model-context", 1)[0]
        _, _, note = head.partition("Your previous answer was not accepted. ")
        notes.append(note)
    return notes


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_mcp_refuses_bad_cards_and_asks_again(server: str, mode: str) -> None:
    person = Stubborn()
    async with Client(f"{server}/mcp", mode=mode, elicitation_callback=person) as client:
        result = await client.call_tool("pick_card", {"count": 5})
    assert not result.is_error, result.content
    notes = refusals(person.messages)
    assert len(notes) == 3 and notes[0] == ""
    assert notes[1].startswith(f"Card: {NOT_DEALT}")
    assert notes[2].startswith(f"Card: {NOT_DEALT}")
    assert result.structured_content is not None
    assert str(result.structured_content["result"]).startswith("You picked the ")


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_mcp_refuses_an_unknown_flight_and_a_taken_seat(server: str, mode: str) -> None:
    person = Stubborn()
    async with Client(f"{server}/mcp", mode=mode, elicitation_callback=person) as client:
        result = await client.call_tool("book_flight", ROUTE)
    assert not result.is_error, result.content
    notes = refusals(person.messages)
    assert len(notes) == 6  # flight and seat twice each, the review, the payment
    assert notes[1].startswith(f"Flight id: {NOT_OFFERED}")
    assert notes[3].startswith(f"Seat: {SEAT_TAKEN}")
    booked = result.structured_content
    assert booked is not None
    assert (booked["booked"], booked["flight"], booked["seat"]) == (True, FLIGHT.number, FREE)


# MCP: clients that cannot elicit answer with _respond -----------------------------------------


async def respond(client: Client, request: dict[str, Any], payload: dict[str, Any]) -> str:
    """Answer ``request``; the error text when refused, '' when taken."""
    answer = await client.call_tool(
        "_respond", {"request_id": request["request_id"], "payload": payload}
    )
    if not answer.is_error:
        assert answer.structured_content is not None and answer.structured_content["ok"] is True
        return ""
    [text] = answer.content
    assert isinstance(text, types.TextContent)
    return text.text


@contextlib.asynccontextmanager
async def cannot_elicit(server: str) -> AsyncIterator[tuple[Client, asyncio.Queue[Any]]]:
    """A legacy client without elicitation, and the request notifications it receives."""
    requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            requests.put_nowait(params.data)

    async with Client(f"{server}/mcp", mode="legacy", logging_callback=on_log) as client:
        yield client, requests


async def test_respond_refuses_bad_cards_and_keeps_the_request_open(server: str) -> None:
    async with cannot_elicit(server) as (client, requests):
        call = asyncio.create_task(client.call_tool("pick_card", {"count": 5}))
        request = await asyncio.wait_for(requests.get(), 10)
        cards = request["context"]["cards"]
        assert f"Card: {NOT_DEALT}" in await respond(client, request, {"card": "ZZ"})
        refused = await respond(client, request, {"card": not_dealt(cards)})
        assert f"Card: {NOT_DEALT}" in refused
        assert await respond(client, request, {"card": cards[1]["code"]}) == ""
        result = await asyncio.wait_for(call, 10)
    assert result.structured_content == {"result": f"You picked the {cards[1]['name']}."}


async def test_respond_refuses_an_unknown_flight_and_a_taken_seat(server: str) -> None:
    async with cannot_elicit(server) as (client, requests):
        call = asyncio.create_task(client.call_tool("book_flight", ROUTE))
        flights = await asyncio.wait_for(requests.get(), 10)
        refused = await respond(client, flights, {"flight_id": "XX-999"})
        assert f"Flight id: {NOT_OFFERED}" in refused
        assert await respond(client, flights, {"flight_id": FLIGHT.id}) == ""
        seats = await asyncio.wait_for(requests.get(), 10)
        assert f"Seat: {SEAT_TAKEN}" in await respond(client, seats, label(TAKEN))
        assert await respond(client, seats, label(FREE)) == ""
        review = await asyncio.wait_for(requests.get(), 10)
        assert await respond(client, review, {"confirm": True}) == ""
        payment = await asyncio.wait_for(requests.get(), 10)
        await pay(payment["url"])
        result = await asyncio.wait_for(call, 10)
    booked = result.structured_content
    assert booked is not None
    assert (booked["booked"], booked["seat"]) == (True, FREE)
