"""The bare MCP SDK baseline for ``bench/mcp_booking.py``: book_flight's first two questions.

The same log line, progress notes, flight search, seat map, messages, context (in the message,
as ChatBridge's legacy push sends it to clients without the context extension) and answer
checks (flight on the list, seat in the cabin and free) as ``bench/mcp_booking_plugin.py``,
on an ``MCPServer`` with nothing durable: no session row, no journal.

    python bench/mcp_sdk_booking_server.py PORT
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

from bench.mcp_sdk_server import serve  # noqa: E402
from chatbridge.author.model_context import encode_message  # noqa: E402
from plugins.book_flight.data import find_flight, search_flights, seat_map_for  # noqa: E402


class PickFlight(BaseModel):
    flight_id: str = Field(min_length=1, max_length=32, description="Id of the chosen flight")


class PickSeat(BaseModel):
    row: int = Field(ge=1, le=99, description="Seat row")
    seat: Literal["A", "B", "C", "D", "E", "F"] = Field(description="Seat letter")


server = MCPServer("bench-sdk-booking", log_level="WARNING")


@server.tool()
async def book_two(origin: str, destination: str, ctx: Context) -> dict[str, object]:
    """Book a flight: pick the flight, then the seat."""
    origin, destination = origin.upper(), destination.upper()
    await ctx.info(f"Searching flights {origin} {destination}")
    flights = search_flights(origin, destination)
    await ctx.report_progress(1, 4, f"Found {len(flights)} flights")
    menu = "\n".join(
        f"{i}. {f.airline} {f.number} | {f.departs}-{f.arrives} | ${f.price_usd}"
        for i, f in enumerate(flights, 1)
    )
    message = f"Select your flight from {origin} to {destination}:\n\n{menu}"
    context = {"flights": [f.model_dump() for f in flights]}
    while True:
        choice = await ctx.elicit(encode_message(message, context), PickFlight)
        if choice.action != "accept":
            return {"booked": False}
        flight = find_flight(flights, choice.data.flight_id)
        if flight is not None:
            break
    await ctx.report_progress(2, 4, f"Selected {flight.number}")
    seat_map = seat_map_for(flight.id)
    message = encode_message(
        f"Select your seat on {flight.number}", {"seat_map": seat_map.model_dump()}
    )
    while True:
        seat = await ctx.elicit(message, PickSeat)
        if seat.action != "accept":
            return {"booked": False}
        if seat.data.row <= seat_map.rows and not seat_map.is_taken(seat.data.row, seat.data.seat):
            break
    await ctx.report_progress(3, 4, f"Seat {seat.data.row}{seat.data.seat} held")
    return {"booked": True, "flight": flight.number, "seat": f"{seat.data.row}{seat.data.seat}"}


if __name__ == "__main__":
    serve(server, int(sys.argv[1]))
