"""The in-app plugin: the flight list and seat picker forms for book_flight's questions."""

from __future__ import annotations

from typing import Any

from chatbridge import ElicitRequest, ElicitResult, PluginContext, make_plugin
from plugins.book_flight.data import SeatMap, find_flight
from plugins.book_flight.tool import PickFlight, PickSeat, book_flight

__all__ = ["book_flight_plugin"]


async def pick_flight(req: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
    flights = req.context.get("flights") or []

    def offered(answer: PickFlight) -> dict[str, str] | None:
        if find_flight(flights, answer.flight_id) is None:
            return {"flight_id": "Choose one of the flights listed."}
        return None

    submission = await ctx.render(
        "book_flight/flight_list.html", {"flights": flights}, validate=offered
    )
    return submission.result


async def pick_seat(req: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
    seat_map = SeatMap.model_validate(req.context["seat_map"])

    def available(answer: PickSeat) -> dict[str, str] | None:
        label = f"{answer.row}{answer.seat}"
        if answer.row > seat_map.rows:
            return {"row": f"This aircraft has rows 1 to {seat_map.rows}."}
        if seat_map.is_taken(answer.row, answer.seat):
            return {"seat": f"Seat {label} is taken; choose another."}
        return None

    submission = await ctx.render(
        "book_flight/seat_picker.html",
        {"seat_map": seat_map, "rows": seat_map.grid(), "first_free": seat_map.first_free()},
        validate=available,
    )
    return submission.result


book_flight_plugin = (
    make_plugin(book_flight).on_elicit(pick_flight=pick_flight, pick_seat=pick_seat).build()
)
