"""Benchmark-only tool ``book_two``: book_flight's first two questions, as book_flight asks them.

The same parameters, log line, progress notes, flight search, seat map, keys, answer models
(with their rules: the flight must be on the list, the seat free) and messages as
``plugins/book_flight/tool.py``, and nothing after the seat: the flow the bare MCP SDK server of
``bench/mcp_sdk_booking_server.py`` serves too, so the two are compared on the same work.
"""

from __future__ import annotations

from typing import Any

from chatbridge import ToolContext, auto_form, create_mcp_tool, make_plugin
from plugins.book_flight.data import find_flight, search_flights, seat_map_for
from plugins.book_flight.tool import BookFlightParams, PickFlight, PickSeat

__all__ = ["book_two", "book_two_plugin"]


async def run(params: BookFlightParams, ctx: ToolContext) -> dict[str, Any]:
    origin, destination = params.origin.upper(), params.destination.upper()
    await ctx.log("info", "Searching flights", origin=origin, destination=destination)
    flights = search_flights(origin, destination)
    await ctx.notify(f"Found {len(flights)} flights", progress=1, total=4)
    menu = "\n".join(
        f"{i}. {f.airline} {f.number} | {f.departs}-{f.arrives} | ${f.price_usd}"
        for i, f in enumerate(flights, 1)
    )
    choice = await ctx.elicit(
        "pick_flight",
        message=f"Select your flight from {origin} to {destination}:\n\n{menu}",
        flights=[f.model_dump() for f in flights],
    )
    flight = find_flight(flights, choice.content.flight_id) if choice.accepted else None
    if flight is None:
        return {"booked": False}
    await ctx.notify(f"Selected {flight.number}", progress=2, total=4)
    seat = await ctx.elicit(
        "pick_seat",
        message=f"Select your seat on {flight.number}",
        seat_map=seat_map_for(flight.id).model_dump(),
    )
    if not seat.accepted:
        return {"booked": False}
    return {
        "booked": True,
        "flight": flight.number,
        "seat": f"{seat.content.row}{seat.content.seat}",
    }


book_two = (
    create_mcp_tool("book_two")
    .description("Benchmark: book_flight's flight and seat questions.")
    .parameters(BookFlightParams)
    .elicits(pick_flight=PickFlight, pick_seat=PickSeat)
    .execute(run)
)

book_two_plugin = (
    make_plugin(book_two).on_elicit(pick_flight=auto_form, pick_seat=auto_form).build()
)
