"""Deterministic, realistic flight data: the same route always gives the same flights.

Durations come from great-circle distances between known airports (a stable pseudo distance
for codes not in the table); prices, times and taken seats from a hash of the route.
"""

from __future__ import annotations

import functools
import hashlib
import math
from typing import Any

from pydantic import BaseModel, computed_field

__all__ = [
    "Flight",
    "SeatMap",
    "find_flight",
    "issue_ticket",
    "search_flights",
    "seat_map_for",
]

AIRPORTS: dict[str, tuple[float, float]] = {
    "ATL": (33.64, -84.43),
    "BOS": (42.36, -71.01),
    "DEN": (39.86, -104.67),
    "DFW": (32.90, -97.04),
    "JFK": (40.64, -73.78),
    "LAX": (33.94, -118.41),
    "MIA": (25.80, -80.29),
    "ORD": (41.97, -87.91),
    "SEA": (47.45, -122.31),
    "SFO": (37.62, -122.38),
    "YYZ": (43.68, -79.63),
    "MEX": (19.44, -99.07),
    "GRU": (-23.43, -46.47),
    "LHR": (51.47, -0.45),
    "CDG": (49.01, 2.55),
    "FRA": (50.03, 8.56),
    "AMS": (52.31, 4.76),
    "MAD": (40.47, -3.56),
    "FCO": (41.80, 12.25),
    "MUC": (48.35, 11.79),
    "ZRH": (47.46, 8.55),
    "DXB": (25.25, 55.36),
    "DEL": (28.56, 77.10),
    "SIN": (1.36, 103.99),
    "HKG": (22.31, 113.91),
    "NRT": (35.77, 140.39),
    "HND": (35.55, 139.78),
    "ICN": (37.46, 126.44),
    "SYD": (-33.94, 151.18),
}

AIRLINES = (
    ("SH", "SkyHigh"),
    ("CA", "CloudAir"),
    ("MR", "Meridian"),
    ("PA", "Polar Atlantic"),
    ("BL", "Bluebird"),
)

ROWS = 30
SEATS = "ABCDEF"
EXIT_ROWS = (12, 13)


class Flight(BaseModel):
    """One offer on the flight list."""

    id: str
    airline: str
    number: str
    origin: str
    destination: str
    departs: str
    arrives: str
    duration_minutes: int
    stops: int
    price_usd: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def duration(self) -> str:
        return f"{self.duration_minutes // 60}h {self.duration_minutes % 60:02d}m"


class SeatMap(BaseModel):
    """The cabin of one flight: rows, seat letters, exit rows and taken seats."""

    flight_id: str
    rows: int
    seats: str
    aisle_after: str
    exit_rows: list[int]
    taken: list[str]

    def is_taken(self, row: int, seat: str) -> bool:
        return f"{row}{seat}" in self.taken

    def first_free(self) -> str | None:
        """The label of the first available seat (where keyboard focus starts)."""
        taken = set(self.taken)
        for row in range(1, self.rows + 1):
            for letter in self.seats:
                if f"{row}{letter}" not in taken:
                    return f"{row}{letter}"
        return None

    def grid(self) -> list[dict[str, Any]]:
        """Rows of seats for templates: label, letter, taken, aisle after it, exit row."""
        taken = set(self.taken)
        return [
            {
                "number": row,
                "exit": row in self.exit_rows,
                "seats": [
                    {
                        "label": f"{row}{letter}",
                        "letter": letter,
                        "taken": f"{row}{letter}" in taken,
                        "aisle_after": letter == self.aisle_after,
                    }
                    for letter in self.seats
                ],
            }
            for row in range(1, self.rows + 1)
        ]


def _hash(*parts: object) -> int:
    return int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:12], 16)


def _distance_km(origin: str, destination: str) -> float:
    a, b = AIRPORTS.get(origin), AIRPORTS.get(destination)
    if a is None or b is None:
        return 600 + _hash("distance", *sorted((origin, destination))) % 5400
    lat1, lon1, lat2, lon2 = map(math.radians, (*a, *b))
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * 6371 * math.asin(math.sqrt(h))


def _clock(minutes: int) -> str:
    day, minutes = divmod(minutes, 24 * 60)
    suffix = f" +{day}" if day else ""
    return f"{minutes // 60:02d}:{minutes % 60:02d}{suffix}"


def normalise_code(code: str) -> str:
    return code.strip().upper()


def search_flights(origin: str, destination: str) -> list[Flight]:
    """Four to five flights for the route, cheapest first."""
    origin, destination = normalise_code(origin), normalise_code(destination)
    distance = _distance_km(origin, destination)
    seed = _hash(origin, destination)
    count = 4 + seed % 2
    flights = []
    for i in range(count):
        code, airline = AIRLINES[(seed + i) % len(AIRLINES)]
        h = _hash(seed, i)
        stops = 1 if distance > 7000 and h % 3 == 0 else 0
        duration = int(distance / 820 * 60) + 35 + stops * (70 + h % 50)
        departs = 6 * 60 + (i * 197 + h % 90) % (16 * 60)
        departs -= departs % 5
        price = int(60 + distance * (0.085 + (h % 40) / 1000) - stops * 40)
        number = f"{code}-{100 + h % 900}"
        flights.append(
            Flight(
                id=number,
                airline=airline,
                number=number,
                origin=origin,
                destination=destination,
                departs=_clock(departs),
                arrives=_clock(departs + duration),
                duration_minutes=duration,
                stops=stops,
                price_usd=max(price, 49),
            )
        )
    return sorted(flights, key=lambda f: (f.price_usd, f.departs))


def find_flight(flights: list[dict[str, Any]] | list[Flight], flight_id: str) -> Flight | None:
    for raw in flights:
        flight = raw if isinstance(raw, Flight) else Flight.model_validate(raw)
        if flight.id == flight_id:
            return flight
    return None


def seat_map_for(flight_id: str) -> SeatMap:
    """The cabin of ``flight_id``; about a third of the seats are taken."""
    return SeatMap(
        flight_id=flight_id,
        rows=ROWS,
        seats=SEATS,
        aisle_after="C",
        exit_rows=list(EXIT_ROWS),
        taken=list(_taken(flight_id)),
    )


@functools.lru_cache(maxsize=256)  # about 3 KB a flight
def _taken(flight_id: str) -> tuple[str, ...]:
    """The seats of ``flight_id`` taken by others (180 hashes: drawn once per flight)."""
    return tuple(
        f"{row}{seat}"
        for row in range(1, ROWS + 1)
        for seat in SEATS
        if _hash(flight_id, row, seat) % 100 < 35
    )


def issue_ticket(flight_id: str, seat: str, *, idempotency_key: str) -> str:
    """Issue a ticket: a side effect, so the tool wraps it in ``ctx.step``, which passes the
    step's ``idempotency_key``. As a booking system with idempotency keys does, the same key
    gives the same ticket: a step run again after an interruption issues no second one."""
    digest = hashlib.sha256(f"ticket:{idempotency_key}".encode()).hexdigest()[:10].upper()
    return f"CB-{flight_id.replace('-', '')}-{seat}-{digest}"
