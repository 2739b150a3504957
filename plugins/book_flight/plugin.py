"""The in-app plugin: the flight list, seat picker and review forms for book_flight's
questions, and the payment page of its URL question.

The forms only decide how the questions look; which answers count (a flight on the list, a free
seat in the cabin) is the rules of ``PickFlight`` and ``PickSeat``, enforced on every transport.
"""

from __future__ import annotations

from typing import Any

from chatbridge import ElicitRequest, ElicitResult, PluginContext, make_plugin
from plugins.book_flight.data import SeatMap
from plugins.book_flight.payment import payment_page
from plugins.book_flight.tool import book_flight

__all__ = ["book_flight_plugin"]


async def pick_flight(req: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
    flights = req.context.get("flights") or []
    submission = await ctx.render("book_flight/flight_list.html", {"flights": flights})
    return submission.result


async def pick_seat(req: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
    seat_map = SeatMap.model_validate(req.context["seat_map"])
    submission = await ctx.render(
        "book_flight/seat_picker.html",
        {"seat_map": seat_map, "rows": seat_map.grid(), "first_free": seat_map.first_free()},
    )
    return submission.result


async def review(req: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
    return (await ctx.render("book_flight/review.html")).result


book_flight_plugin = (
    make_plugin(book_flight)
    .on_elicit(pick_flight=pick_flight, pick_seat=pick_seat, review=review)
    .on_url_page(payment=payment_page)
    .build()
)
