"""Benchmark-only tool ``book_two``: book_flight's first two questions, as book_flight asks them.

It runs book_flight's own ``pick_flight_and_seat`` (log line, progress notes, flight search,
seat map, keys, answer models with their rules, messages) and stops after the seat: the flow
the bare MCP SDK server of ``bench/mcp_sdk_booking_server.py`` serves too, so that the two are
compared on the same work.
"""

from __future__ import annotations

from typing import Any

from chatbridge import ToolContext, auto_form, create_mcp_tool, make_plugin
from plugins.book_flight.tool import (
    BookFlightParams,
    PickFlight,
    PickSeat,
    pick_flight_and_seat,
)

__all__ = ["book_two", "book_two_plugin"]


async def run(params: BookFlightParams, ctx: ToolContext) -> dict[str, Any]:
    chosen = await pick_flight_and_seat(params, ctx)  # book_flight's own first two questions
    if isinstance(chosen, dict):
        return chosen
    flight, label = chosen
    return {"booked": True, "flight": flight.number, "seat": label}


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
