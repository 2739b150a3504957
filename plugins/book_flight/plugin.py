"""The in-app plugin: the flight list, seat picker and review forms for book_flight's
questions, and the payment page of its URL question.

The forms only decide how the questions look; which answers count (a flight on the list, a free
seat in the cabin) is the rules of ``PickFlight`` and ``PickSeat``, enforced on every transport.
"""

from __future__ import annotations

from chatbridge import ElicitRequest, ElicitResult, PluginContext, make_plugin
from plugins.book_flight.data import SeatMap
from plugins.book_flight.payment import payment_page
from plugins.book_flight.tool import (
    PICK_FLIGHT,
    PICK_SEAT,
    REVIEW,
    PickFlight,
    PickSeat,
    Review,
    book_flight,
)

__all__ = ["book_flight_plugin"]


async def pick_flight(
    req: ElicitRequest[PickFlight], ctx: PluginContext[PickFlight]
) -> ElicitResult[PickFlight]:
    flights = req.context.get("flights") or []
    submission = await ctx.render("book_flight/flight_list.html", {"flights": flights})
    return submission.result


async def pick_seat(
    req: ElicitRequest[PickSeat], ctx: PluginContext[PickSeat]
) -> ElicitResult[PickSeat]:
    seat_map = SeatMap.model_validate(req.context["seat_map"])
    submission = await ctx.render(
        "book_flight/seat_picker.html",
        {"seat_map": seat_map, "rows": seat_map.grid(), "first_free": seat_map.first_free()},
    )
    return submission.result


async def review(req: ElicitRequest[Review], ctx: PluginContext[Review]) -> ElicitResult[Review]:
    return (await ctx.render("book_flight/review.html")).result


book_flight_plugin = (
    make_plugin(book_flight)
    .on(PICK_FLIGHT, pick_flight)
    .on(PICK_SEAT, pick_seat)
    .on(REVIEW, review)
    .on_url_page(payment=payment_page)
    .build()
)
