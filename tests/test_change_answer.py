"""Changing an earlier answer of a running call: the journal forks at that question, the tool
runs again from there, and nothing done after it is done twice (``PluginSession.change``)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from chatbridge import (
    Accept,
    ChangeRefused,
    ElicitNotPending,
    Exit,
    PluginSession,
    SessionManager,
    ToolContext,
    ToolDefinitionError,
    create_mcp_tool,
)
from chatbridge.author.sampling import SampleRequest, SampleResult
from chatbridge.calls.events import ElicitEvent
from tests.support import until_pause


class Flight(BaseModel):
    code: str


class Seat(BaseModel):
    label: str


class Review(BaseModel):
    confirm: bool = True


class Rating(BaseModel):
    stars: int


_tickets = itertools.count(1)
issued: list[str] = []


def issue(code: str, seat: str) -> str:
    ticket = f"T{next(_tickets)}-{code}-{seat}"
    issued.append(ticket)
    return ticket


async def trip(params: Any, ctx: ToolContext) -> dict[str, Any]:
    flight = await ctx.elicit("flight", message="Which flight?")
    seat = await ctx.elicit("seat", message=f"Which seat on {flight.content.code}?")
    try:  # a tool that swallows errors does not swallow a change
        review = await ctx.elicit(
            "review", message=f"Book {flight.content.code}, seat {seat.content.label}?"
        )
    except Exception:
        return {"booked": False, "swallowed": True}
    if not review.accepted:
        return {"booked": False}
    ticket = await ctx.step("ticket", issue, flight.content.code, seat.content.label)
    rating = await ctx.elicit("rate", message="How was it?")
    return {"ticket": ticket, "stars": rating.content.stars if rating.accepted else None}


trip_tool = (
    create_mcp_tool("trip")
    .elicits(flight=Flight, seat=Seat, review=Review, rate=Rating)
    .exits(
        "review",
        change={"seat": "Change seat", "flight": "Change flight"},
        decline=Exit("Don't book", "Ends the booking; nothing is charged."),
        cancel=None,
    )
    .execute(trip)
)


async def no_model(request: SampleRequest) -> SampleResult:
    raise AssertionError("trip samples nothing")


@pytest.fixture
async def manager() -> AsyncIterator[SessionManager]:
    mgr = SessionManager(sampler=no_model)
    yield mgr
    await mgr.shutdown("test finished")


async def question(session: PluginSession) -> ElicitEvent:
    events = await until_pause(session)
    kind, *_ = events[-1]
    assert kind == "elicit", events
    request = session.pending
    assert request is not None
    return ElicitEvent(session.id, request)


async def answer(session: PluginSession, content: dict[str, Any]) -> None:
    request = session.pending
    assert request is not None
    await session.respond_to_elicit(request.id, Accept(content))


async def at_review(manager: SessionManager, call_id: str) -> PluginSession:
    session = await manager.create(trip_tool, {}, call_id=call_id)
    await question(session)
    await answer(session, {"code": "MR-276"})
    await question(session)
    await answer(session, {"label": "4C"})
    await question(session)
    return session


async def test_changing_the_seat_at_the_review_books_one_ticket_with_the_new_seat(
    manager: SessionManager,
) -> None:
    before = len(issued)
    session = await at_review(manager, "c1")
    review = session.pending
    assert review is not None and review.message == "Book MR-276, seat 4C?"
    assert [(c.key, c.label) for c in review.changes] == [
        ("flight", "Change flight"),
        ("seat", "Change seat"),
    ]
    assert review.exits.decline is not None and review.exits.decline.label == "Don't book"
    assert review.exits.cancel is None

    changed = await session.change(str(review.id), "seat")
    assert changed.key == "seat"
    again = await question(session)
    assert again.request.key == "seat"
    assert again.request.message == "Which seat on MR-276?"
    # A new id: a form of the abandoned questions can never answer this one.
    assert str(again.request.id) not in (str(review.id), changed.elicit_id)
    with pytest.raises(ElicitNotPending):
        await session.respond_to_elicit(review.id, Accept({"confirm": True}))

    await answer(session, {"label": "7A"})
    new_review = await question(session)
    assert new_review.request.message == "Book MR-276, seat 7A?"
    await answer(session, {"confirm": True})
    await question(session)  # rate
    await answer(session, {"stars": 5})
    [(kind, result)] = await until_pause(session)
    assert kind == "completed"
    assert result["ticket"].endswith("-MR-276-7A")
    assert issued[before:] == [result["ticket"]]  # one ticket, with the new seat
    keys = [(e["kind"], e["key"]) for e in session.journal]
    assert keys == [
        ("elicit", "flight"),
        ("elicit", "seat"),
        ("elicit", "review"),
        ("step", "ticket"),
        ("elicit", "rate"),
    ]
    assert [e["result"].get("content") for e in session.journal[:2]] == [
        {"code": "MR-276"},
        {"label": "7A"},
    ]


async def test_a_change_past_a_step_is_refused_and_the_question_stays_open(
    manager: SessionManager,
) -> None:
    session = await at_review(manager, "c2")
    await answer(session, {"confirm": True})
    rate = await question(session)
    assert rate.request.key == "rate"
    assert rate.request.changes == ()  # the ticket was issued after every earlier answer
    tickets = len(issued)
    with pytest.raises(ChangeRefused) as refused:
        await session.change(str(rate.request.id), "seat")
    assert "ticket was done after it" in str(refused.value)
    assert session.pending is not None and session.pending.id == rate.request.id
    await answer(session, {"stars": 4})
    [(kind, result)] = await until_pause(session)
    assert kind == "completed" and result["stars"] == 4
    assert len(issued) == tickets  # issued before the refusal, and not again


async def test_a_question_offers_only_what_its_author_named(manager: SessionManager) -> None:
    session = await manager.create(trip_tool, {}, call_id="c3")
    first = await question(session)
    assert first.request.changes == ()  # nothing answered yet
    assert first.request.exits.decline is not None
    assert first.request.exits.decline.label == "Decline"  # the default wording
    await answer(session, {"code": "SH-101"})
    seat = await question(session)
    # Not declared: every earlier answer, with a label made from its key.
    assert [(c.key, c.label) for c in seat.request.changes] == [("flight", "Change flight")]
    with pytest.raises(ChangeRefused) as refused:
        await session.change(str(seat.request.id), "nothing")
    assert "no earlier answer nothing" in str(refused.value)


async def test_the_open_question_must_be_the_one_changed_from(manager: SessionManager) -> None:
    session = await at_review(manager, "c4")
    with pytest.raises(ElicitNotPending):
        await session.change("trip:seat:c4:2", "flight")


async def test_a_resumed_call_asks_the_changed_question_under_the_same_id(
    manager: SessionManager,
) -> None:
    session = await at_review(manager, "c5")
    review = session.pending
    assert review is not None
    await session.change(str(review.id), "flight")
    again = await question(session)
    assert again.request.key == "flight"
    assert session.journal == []  # every answer was after the flight's: all abandoned
    # What a journal store holds now: the abandoned entries, with the review, asked and
    # never answered.
    asked = {"action": "accept"}
    stored: list[dict[str, Any]] = [
        {"seq": 1, "kind": "elicit", "key": "flight", "result": asked, "abandoned": 1},
        {"seq": 2, "kind": "elicit", "key": "seat", "result": asked, "abandoned": 1},
        {"seq": 3, "kind": "elicit", "key": "review", "result": None, "abandoned": 1},
    ]
    resumed = await manager.create(trip_tool, {}, call_id="c5-resumed", journal=stored)
    shown = await question(resumed)
    assert str(shown.request.id).rsplit(":", 1)[1] == str(again.request.id).rsplit(":", 1)[1]


def test_exits_must_name_declared_questions() -> None:
    with pytest.raises(ToolDefinitionError, match="'payment'"):
        create_mcp_tool("x").elicits(seat=Seat).exits("seat", change={"payment": "Pay"}).execute(
            trip
        )
    with pytest.raises(ToolDefinitionError, match="must be an Exit"):
        create_mcp_tool("x").elicits(seat=Seat).exits("seat", decline="No")  # type: ignore[arg-type]


class SlowFork:
    """A journal store whose fork waits until the test lets it finish (a slow database)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.writing = asyncio.Event()  # set once a fork is being written
        self.forked: list[int] = []

    async def append(self, session: Any, entry: Any) -> None:
        return None

    async def start_step(self, session: Any, entry: Any, request: Any) -> None:
        return None

    async def fork(self, session: Any, seq: int) -> None:
        self.writing.set()
        await self.release.wait()
        self.forked.append(seq)


async def test_an_answer_racing_a_change_finds_the_question_closed() -> None:
    store = SlowFork()
    manager = SessionManager(sampler=no_model, journal_store=store)
    try:
        session = await at_review(manager, "race")
        review = session.pending
        assert review is not None
        changing = asyncio.create_task(session.change(str(review.id), "seat"))
        await store.writing.wait()  # the change has begun: its fork is being written
        # The fork is still being written: the review takes no answer meanwhile, and the
        # change is not made (nor said to be) before it is on record.
        with pytest.raises(ElicitNotPending):
            await session.respond_to_elicit(review.id, Accept({"confirm": True}))
        assert not changing.done()
        store.release.set()
        assert (await changing).key == "seat"
        again = await question(session)
        assert again.request.key == "seat"
        assert store.forked == [2]  # from the seat's answer on
        assert [e["key"] for e in session.journal] == ["flight"]
    finally:
        await manager.shutdown("test finished")
