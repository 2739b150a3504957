"""Tools used by the runtime tests, and helpers to read sessions as a person would."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, Field, field_validator

from chatbridge import PluginSession, ToolContext, create_mcp_tool
from chatbridge.calls.events import TERMINAL_EVENTS, SessionEvent

BROKEN_CITY = "Atlantis"


class TripParams(BaseModel):
    city: str = Field(min_length=1)
    nights: int = Field(ge=1, le=30)

    @field_validator("city")
    @classmethod
    def _known(cls, city: str) -> str:
        """A bug in validating the arguments (pydantic lets a RuntimeError through): what a
        client is told of an unexpected failure before the call starts."""
        if city == BROKEN_CITY:
            raise RuntimeError(f"KeyError in the city table of call mcp_{'0' * 32}")
        return city


class PickHotel(BaseModel):
    hotel: str


class Confirm(BaseModel):
    ok: bool


class Rating(BaseModel):
    stars: int = Field(ge=1, le=5)


HOTELS = ["Harbour Inn", "Grand Central"]
bookings_made: list[str] = []  # every real (not replayed) booking side effect


def book_room(hotel: str, nights: int) -> dict[str, Any]:
    booking = f"BK-{len(bookings_made) + 1:04d}"
    bookings_made.append(booking)
    return {"booking": booking, "hotel": hotel, "nights": nights}


async def plan_trip(params: TripParams, ctx: ToolContext) -> dict[str, Any]:
    await ctx.log("info", "Planning a trip", city=params.city)
    await ctx.notify("Looking for hotels", progress=1, total=3)
    hotel = await ctx.elicit("pick_hotel", message=f"Which hotel in {params.city}?", hotels=HOTELS)
    if not hotel.accepted:
        return {"booked": False, "reason": hotel.action}
    tip = await ctx.sample(f"One short travel tip for {params.city}.")
    confirm = await ctx.elicit(
        "confirm", message=f"Book {hotel.content.hotel} for {params.nights} nights?"
    )
    if not confirm.accepted or not confirm.content.ok:
        return {"booked": False, "reason": "not confirmed"}
    await ctx.notify("Booking", progress=2, total=3)
    booking = await ctx.step("book_room", book_room, hotel.content.hotel, params.nights)
    rating = await ctx.elicit("rate", message="How was the booking experience?")
    await ctx.notify("Done", progress=3, total=3)
    return {
        "booked": True,
        "booking": booking["booking"],
        "tip": tip.text,
        "stars": rating.content.stars if rating.accepted else None,
    }


trip_tool = (
    create_mcp_tool("plan_trip")
    .description("Plan a trip: choose a hotel, confirm, book, rate.")
    .parameters(TripParams)
    .elicits(pick_hotel=PickHotel, confirm=Confirm, rate=Rating)
    .done_when("booked")
    .execute(plan_trip)
)


def describe(event: SessionEvent) -> tuple[Any, ...]:
    """An event as a short tuple, for exact sequence assertions."""
    if event.type == "elicit":
        return ("elicit", str(event.request.id), event.request.message)
    if event.type == "log":
        return ("log", event.level, event.message, event.data)
    if event.type == "progress":
        return ("progress", event.message, event.progress, event.total)
    if event.type == "completed":
        return ("completed", event.result)
    if event.type == "failed":
        return ("failed", event.error)
    return ("aborted", event.reason)


async def until_pause(session: PluginSession, timeout: float = 10.0) -> list[tuple[Any, ...]]:
    """Events up to and including the next question or the end of the session."""
    seen: list[tuple[Any, ...]] = []
    while True:
        event = await asyncio.wait_for(session.next_event(), timeout)
        seen.append(describe(event))
        if event.type == "elicit" or event.type in TERMINAL_EVENTS:
            return seen


class Hostile(BaseModel):
    """<img src=x onerror=alert(1)>"""

    answer: str = Field(description="<script>alert('field')</script>")


async def _hostile(params: Any, ctx: ToolContext) -> None:
    return None


hostile_tool = (
    create_mcp_tool("hostile")
    .description("<script>alert(1)</script>")
    .elicits(ask=Hostile)
    .execute(_hostile)
)


async def _answer(req: Any, ctx: Any) -> Any:
    from chatbridge import Cancel

    return Cancel()


def _hostile_plugin() -> Any:
    from chatbridge import make_plugin

    return make_plugin(hostile_tool).on_elicit(ask=_answer).build()


hostile_plugin = _hostile_plugin()


def _trip_plugin() -> Any:
    """plan_trip as a plugin, for servers that serve it (tests/tasks_settings.py); over MCP
    its questions go to the client, so the chat handlers only decline."""
    from chatbridge import make_plugin

    return (
        make_plugin(trip_tool).on_elicit(pick_hotel=_answer, confirm=_answer, rate=_answer).build()
    )


trip_plugin = _trip_plugin()
