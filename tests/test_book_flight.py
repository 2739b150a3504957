"""The book_flight plugin end to end: its forms rendered by Django, answered like a person would."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

from django.template.loader import render_to_string
from django.test import RequestFactory

from chatbridge import ElicitRequest, FormPost, PluginContext, SessionManager, UrlQuestion
from chatbridge.calls.links import MemoryUrlLinks
from plugins.book_flight.data import find_flight, issue_ticket, search_flights, seat_map_for
from plugins.book_flight.payment import payment_page
from plugins.book_flight.plugin import book_flight_plugin
from plugins.book_flight.tool import PickSeat, book_flight
from tests.support import until_pause

BUTTON = re.compile(r"<button\b(?P<attrs>[^>]*)>(?P<label>.*?)</button>", re.S)


def buttons(html: str) -> list[dict[str, Any]]:
    """The buttons of a rendered form: name, value, label, enabled."""
    found = []
    for match in BUTTON.finditer(html):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', match.group("attrs")))
        found.append(
            {
                "name": attrs.get("name"),
                "value": unescape(attrs.get("value", "")),
                "label": unescape(attrs.get("aria-label") or match.group("label").strip()),
                "enabled": " disabled" not in match.group("attrs"),
            }
        )
    return found


class Person:
    """Renders each form with Django and clicks what a person would click."""

    def __init__(self, *clicks: Any) -> None:
        self.clicks = list(clicks)
        self.pages: list[str] = []

    async def show(
        self, template: str, context: dict[str, Any], errors: dict[str, list[str]]
    ) -> FormPost:
        html = render_to_string(template, context)
        self.pages.append(html)
        return self.clicks.pop(0)(buttons(html))


TEST_CARD = {
    "name": "Ada Lovelace",
    "number": "4242 4242 4242 4242",
    "expiry": "12/39",
    "cvc": "123",
}


async def pay_on_page(
    manager: SessionManager, request: ElicitRequest, card: dict[str, str]
) -> tuple[int, str]:
    """Post ``card`` to book_flight's payment page for ``request``, as its link would."""
    links = manager.url_links
    assert isinstance(links, MemoryUrlLinks) and request.url is not None
    token = request.url.rstrip("/").rsplit("/", 1)[1]

    async def complete(content: Any) -> None:
        await links.complete(token, content, manager)

    question = UrlQuestion(request.id, request.message, request.context, request.params, complete)
    response = await payment_page(RequestFactory().post(request.url, card), question)
    return response.status_code, response.content.decode()


async def drive(
    manager: SessionManager, person: Person, params: dict[str, str]
) -> list[tuple[Any, ...]]:
    session = await manager.create(book_flight, params, call_id="call-bf")
    seen: list[tuple[Any, ...]] = []
    while True:
        events = await until_pause(session)
        seen += events
        if events[-1][0] != "elicit":
            return seen
        request: ElicitRequest = session.pending
        if request.mode == "url":
            status, page = await pay_on_page(manager, request, TEST_CARD)
            assert status == 200 and "card ending in 4242" in page
            continue
        result = await book_flight_plugin.handle(request, PluginContext(request, person))
        await session.respond_to_elicit(request.id, result)


def first_flight(found: list[dict[str, Any]]) -> FormPost:
    select = [b for b in found if b["name"] == "flight_id"]
    assert [b["label"].split()[0] for b in select]  # every card has a Select button
    return FormPost("accept", {"flight_id": select[0]["value"]})


def seat(label: str) -> Any:
    def click(found: list[dict[str, Any]]) -> FormPost:
        return FormPost("accept", {"seat_label": label})

    return click


def first_free_seat(found: list[dict[str, Any]]) -> FormPost:
    free = [b for b in found if b["name"] == "seat_label" and b["enabled"]]
    return FormPost("accept", {"seat_label": free[0]["value"]})


def confirm(found: list[dict[str, Any]]) -> FormPost:
    assert [b["label"] for b in found if b["value"] == "accept"] == ["Confirm and pay"]
    return FormPost("accept", {"confirm": "true"})


def test_search_is_deterministic_and_realistic() -> None:
    flights = search_flights("jfk", "LAX")
    assert flights == search_flights("JFK", "lax")
    assert 4 <= len(flights) <= 5
    assert [f.price_usd for f in flights] == sorted(f.price_usd for f in flights)
    for flight in flights:
        assert re.fullmatch(r"[A-Z]{2}-\d{3}", flight.number)
        assert 300 <= flight.duration_minutes <= 480  # JFK-LAX is five to six hours
        assert re.fullmatch(r"\d\d:\d\d( \+1)?", flight.departs)
    assert len({f.id for f in flights}) == len(flights)
    assert search_flights("JFK", "SYD")[0].duration_minutes > 900
    assert search_flights("AAA", "BBB")  # unknown airports still get flights


def test_ticket_numbers_do_not_collide_at_scale_and_one_key_is_one_ticket() -> None:
    """Ticket numbers end in 40 bits drawn from the step's idempotency key: ten thousand keys
    (a thousand bookings of one seat collided about once in 30 runs with 24 bits), and the
    same key, run again after an interruption, is the same ticket."""
    suffix = issue_ticket("SH-563", "1A", idempotency_key="call-1:5").rsplit("-", 1)[1]
    assert re.fullmatch(r"[0-9A-F]{10}", suffix)
    keys = [f"call-{n}:5" for n in range(10_000)]
    assert len({issue_ticket("SH-563", "1A", idempotency_key=k) for k in keys}) == 10_000
    again = issue_ticket("SH-563", "1A", idempotency_key="call-1:5")
    assert again.endswith(suffix)


async def test_a_booking_from_flight_list_to_ticket(manager: SessionManager) -> None:
    person = Person(first_flight, first_free_seat, confirm)
    events = await drive(manager, person, {"origin": "JFK", "destination": "LAX"})
    flights = search_flights("JFK", "LAX")
    chosen = flights[0]
    flight_page, seat_page, review_page = person.pages
    for flight in flights:
        assert flight.airline in flight_page and flight.number in flight_page
        assert f"${flight.price_usd}" in flight_page and flight.duration in flight_page
    free_seats = [b["label"] for b in buttons(seat_page) if b["enabled"]]
    taken_seats = [b["label"] for b in buttons(seat_page) if not b["enabled"]]
    assert set(taken_seats) == set(seat_map_for(chosen.id).taken)
    assert len(free_seats) + len(taken_seats) == 30 * 6
    assert "Exit" in seat_page

    kinds = [e[0] for e in events]
    assert kinds == [
        "log",
        "progress",
        "elicit",
        "progress",
        "elicit",
        "progress",
        "elicit",  # review
        "elicit",  # payment, on its page
        "progress",
        "log",
        "completed",
    ]
    assert f"${chosen.price_usd}" in review_page and free_seats[0] in review_page
    result = events[-1][1]
    assert result["booked"] is True and result["seat"] == free_seats[0]
    assert result["paid"] == {"last4": "4242"}
    assert result["flight"] == chosen.number
    assert re.fullmatch(
        rf"CB-{chosen.id.replace('-', '')}-{free_seats[0]}-[0-9A-F]{{10}}", result["ticket"]
    )
    assert "LAX" in result["tip"]


async def test_a_taken_seat_is_refused_and_the_form_shown_again(manager: SessionManager) -> None:
    chosen = search_flights("JFK", "LAX")[0]
    taken = seat_map_for(chosen.id).taken[0]
    person = Person(first_flight, seat(taken), seat("31A"), first_free_seat, confirm)
    events = await drive(manager, person, {"origin": "JFK", "destination": "LAX"})
    assert len(person.pages) == 5
    assert f"Seat {taken} is taken; choose another." in person.pages[2]
    assert "This aircraft has rows 1 to 30." in person.pages[3]
    assert events[-1][1]["booked"] is True


async def test_declining_the_flight_list_ends_without_booking(manager: SessionManager) -> None:
    person = Person(lambda found: FormPost("decline"))
    events = await drive(manager, person, {"origin": "JFK", "destination": "LAX"})
    assert events[-1] == ("completed", {"booked": False, "reason": "flight selection declined"})


def test_seat_answers_accept_a_label_or_row_and_letter() -> None:
    assert PickSeat.model_validate({"seat_label": "12c"}) == PickSeat(row=12, seat="C")
    assert PickSeat.model_validate({"row": "3", "seat": "A"}) == PickSeat(row=3, seat="A")
    assert find_flight(search_flights("JFK", "LAX"), "XX-000") is None


def test_tool_output_is_escaped_in_the_forms() -> None:
    hostile = [
        {
            "id": "<script>",
            "airline": "<b>Evil</b>",
            "number": '"><img>',
            "origin": "A",
            "destination": "B",
            "departs": "1",
            "arrives": "2",
            "duration_minutes": 60,
            "duration": "1h",
            "stops": 0,
            "price_usd": 1,
        }
    ]
    html = render_to_string("book_flight/flight_list.html", {"flights": hostile, "errors": {}})
    assert "<script>" not in html and "<b>Evil</b>" not in html and '"><img>' not in html
    assert "&lt;b&gt;Evil&lt;/b&gt;" in html
