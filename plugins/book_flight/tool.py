"""The book_flight tool: written once, served in the web chat and over MCP."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from django.utils.translation import gettext as _
from django.utils.translation import ngettext, pgettext_lazy
from pydantic import BaseModel, Field, model_validator

from chatbridge import (
    AnswerRefused,
    ElicitKey,
    Exit,
    ToolContext,
    answer_rule,
    create_mcp_tool,
)
from plugins.book_flight.data import (
    Flight,
    SeatMap,
    find_flight,
    issue_ticket,
    search_flights,
    seat_map_for,
)

__all__ = [
    "PAYMENT",
    "PICK_FLIGHT",
    "PICK_SEAT",
    "REVIEW",
    "BookFlightParams",
    "PaymentDone",
    "PickFlight",
    "PickSeat",
    "Review",
    "book_flight",
    "pick_flight_and_seat",
]


class BookFlightParams(BaseModel):
    origin: str = Field(min_length=2, max_length=64, description="Departure airport, e.g. JFK")
    destination: str = Field(min_length=2, max_length=64, description="Arrival airport, e.g. LAX")


class PickFlight(BaseModel):
    flight_id: str = Field(min_length=1, max_length=32, description="Id of the chosen flight")

    @answer_rule("flight_id")
    def _offered(cls, flight_id: str, context: Mapping[str, Any]) -> None:
        if find_flight(context.get("flights") or [], flight_id) is None:
            raise AnswerRefused(_("Choose one of the flights listed."))


class PickSeat(BaseModel):
    row: int = Field(ge=1, le=99, description="Seat row")
    seat: Literal["A", "B", "C", "D", "E", "F"] = Field(description="Seat letter")

    @model_validator(mode="before")
    @classmethod
    def _from_label(cls, data: Any) -> Any:
        """Accept the seat picker's single ``seat_label`` ("12C") as well as row + seat."""
        if isinstance(data, dict) and "seat_label" in data and "row" not in data:
            label = str(data["seat_label"]).strip().upper()
            data = {k: v for k, v in data.items() if k != "seat_label"}
            data.update(row=label[:-1], seat=label[-1:])
        return data

    @answer_rule("row")
    def _in_cabin(cls, row: int, context: Mapping[str, Any]) -> None:
        rows = SeatMap.model_validate(context["seat_map"]).rows
        if row > rows:
            raise AnswerRefused(_("This aircraft has rows 1 to %(rows)s.") % {"rows": rows})

    @answer_rule("seat")
    def _free(cls, seat: str, context: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
        seat_map = SeatMap.model_validate(context["seat_map"])
        row = answer.get("row")  # absent when the row itself was refused
        if seat not in seat_map.seats:
            raise AnswerRefused(
                _("This aircraft has seats %(seats)s.") % {"seats": ", ".join(seat_map.seats)}
            )
        if row is not None and seat_map.is_taken(row, seat):
            raise AnswerRefused(
                _("Seat %(seat)s is taken; choose another.") % {"seat": f"{row}{seat}"}
            )


class Review(BaseModel):
    confirm: bool = Field(default=True, description="Book this flight and seat at this price")


class PaymentDone(BaseModel):
    """What the payment page reports: never the card, only a token for it and its last
    four digits."""

    payment_token: str = Field(min_length=16, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    last4: str = Field(pattern=r"^[0-9]{4}$", description="Last four digits of the card")


# The questions book_flight asks, typed: each answer arrives as its model.
PICK_FLIGHT = ElicitKey("pick_flight", PickFlight)
PICK_SEAT = ElicitKey("pick_seat", PickSeat)
REVIEW = ElicitKey("review", Review)
PAYMENT = ElicitKey("payment", PaymentDone)

_PAST = {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}


async def pick_flight_and_seat(
    params: BookFlightParams, ctx: ToolContext
) -> tuple[Flight, str] | dict[str, Any]:
    """A booking's first two questions: a flight on the route, then a free seat on it. The
    flight and the seat's label, or the result of a booking that stops here."""
    origin, destination = params.origin.upper(), params.destination.upper()
    await ctx.log("info", "Searching flights", origin=origin, destination=destination)
    flights = search_flights(origin, destination)
    found = ngettext("Found %(count)d flight", "Found %(count)d flights", len(flights))
    await ctx.notify(found % {"count": len(flights)}, progress=1, total=4)
    menu = "\n".join(
        f"{i}. {f.airline} {f.number} | {f.departs}-{f.arrives} | ${f.price_usd}"
        for i, f in enumerate(flights, 1)
    )
    choice = await ctx.elicit(
        PICK_FLIGHT,
        message=f"Select your flight from {origin} to {destination}:\n\n{menu}",
        flights=[f.model_dump() for f in flights],
    )
    if not choice.accepted:
        return {"booked": False, "reason": f"flight selection {_PAST[choice.action]}"}
    flight = find_flight(flights, choice.content.flight_id)
    if flight is None:  # unreachable: PickFlight's rule accepts only the flights offered
        return {"booked": False, "reason": f"no flight {choice.content.flight_id!r} on this route"}
    await ctx.notify(_("Selected %(flight)s") % {"flight": flight.number}, progress=2, total=4)

    seat_map = seat_map_for(flight.id)
    seat = await ctx.elicit(
        PICK_SEAT,
        message=f"Select your seat on {flight.number}",
        seat_map=seat_map.model_dump(),
    )
    if not seat.accepted:
        return {"booked": False, "reason": f"seat selection {_PAST[seat.action]}"}
    label = f"{seat.content.row}{seat.content.seat}"  # PickSeat's rules: in the cabin and free
    await ctx.notify(_("Seat %(seat)s held") % {"seat": label}, progress=3, total=4)

    return flight, label


async def run_book_flight(params: BookFlightParams, ctx: ToolContext) -> dict[str, Any]:
    chosen = await pick_flight_and_seat(params, ctx)
    if isinstance(chosen, dict):
        return chosen
    flight, label = chosen
    origin, destination = params.origin.upper(), params.destination.upper()

    price = flight.price_usd
    review = await ctx.elicit(
        REVIEW,
        message=f"Book {flight.airline} {flight.number}, seat {label}, for ${price}?",
        flight=f"{flight.airline} {flight.number}",
        route=f"{origin}-{destination}",
        departs=flight.departs,
        seat=label,
        price_usd=price,
    )
    if not review.accepted or not review.content.confirm:
        return {"booked": False, "reason": "booking not confirmed"}
    paid = await ctx.elicit_url(
        PAYMENT,
        message=f"Pay ${price} for {flight.airline} {flight.number}, seat {label}",
        link_label="Continue to secure payment",
        amount_usd=price,
        flight=flight.number,
        seat=label,
    )
    if not paid.accepted:
        return {"booked": False, "reason": f"payment {_PAST[paid.action]}"}
    # Paid: the call is committed (.commits(PAYMENT)). The ticket comes first, nothing between.
    ticket = await ctx.step("issue_ticket", issue_ticket, flight.id, label)
    await ctx.notify(_("Ticket issued"), progress=4, total=4)
    tip = await ctx.sample(f"One short travel tip for {destination} airport.", max_tokens=60)
    await ctx.log("info", "Booked", ticket=ticket)
    return {
        "booked": True,
        "ticket": ticket,
        "flight": flight.number,
        "airline": flight.airline,
        "route": f"{origin}-{destination}",
        "departs": flight.departs,
        "seat": label,
        "price_usd": flight.price_usd,
        "paid": {"last4": paid.content.last4},
        "tip": tip.text,
    }


def refund_payment(paid: PaymentDone, *, idempotency_key: str) -> dict[str, str]:
    """Undo a payment whose booking cannot be finished (the call's compensation): a refund
    of the token the page reported, one per key (a refund run again is the same refund)."""
    digest = hashlib.sha256(f"refund:{idempotency_key}".encode()).hexdigest()[:10].upper()
    return {"refund": f"RF-{digest}", "card": f"ending {paid.last4}"}


# What book_flight's questions offer besides an answer (``.exits()``), in the person's words.
_CHANGE_FLIGHT = pgettext_lazy("exit", "Change flight")
_CHANGE_BOTH: Mapping[ElicitKey[Any] | str, Any] = {
    PICK_SEAT: pgettext_lazy("exit", "Change seat"),
    PICK_FLIGHT: _CHANGE_FLIGHT,
}
_DONT_BOOK = pgettext_lazy("exit", "Don't book")
_DONT_PAY = pgettext_lazy("exit", "Don't pay")
_NOTHING_CHARGED = pgettext_lazy("exit", "Ends this booking here; nothing is charged.")

book_flight = (
    create_mcp_tool("book_flight")
    .description(
        "Book a flight for the user: search, let them pick a flight and a seat, review the "
        "price, take payment on a secure page, issue a ticket."
    )
    .example("Book a flight from JFK to LAX")
    .parameters(BookFlightParams)
    .elicits(PICK_FLIGHT, PICK_SEAT, REVIEW, PAYMENT)
    .commits(PAYMENT, compensate=refund_payment, label="the payment")
    .done_when("booked")  # {"booked": false, "reason": ...}: the card says "Not done"
    # Each later question offers to change an earlier answer; none once the payment is made.
    .exits(PICK_SEAT, change={PICK_FLIGHT: _CHANGE_FLIGHT})
    .exits(REVIEW, change=_CHANGE_BOTH, decline=Exit(_DONT_BOOK, _NOTHING_CHARGED), cancel=None)
    .exits(PAYMENT, change=_CHANGE_BOTH, decline=Exit(_DONT_PAY, _NOTHING_CHARGED), cancel=None)
    .execute(run_book_flight)
)
