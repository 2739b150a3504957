"""buy_ticket: a paid booking whose ticket comes from a ticket office outside the server (a real
HTTP service the outage tests run), for servers started by tests/test_outages.py.

The office (``TicketOffice``) is the world: it counts every ticket it issues, one per
idempotency key (as booking and payment systems with idempotency keys do), so a test sees
whether a step ran twice for the world, not only in the journal. It can hold its answers back
until the test lets them go, so a database outage lands between a step's start and its end.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from pydantic import BaseModel

from chatbridge import ElicitKey, ToolContext, auto_form, create_mcp_tool, make_plugin

__all__ = ["OFFICE_URL", "TicketOffice", "buy_ticket_plugin", "ticket_office"]

OFFICE_URL = "TICKET_OFFICE_URL"  # the environment variable naming the office's address


class Route(BaseModel):
    origin: str
    destination: str


class Pay(BaseModel):
    card: str


PAY = ElicitKey("pay", Pay)


async def issue_ticket(origin: str, destination: str, *, idempotency_key: str = "") -> str:
    """Ask the office for a ticket, under the step's key (the same key: the same ticket). No
    key (a runtime that passes none) makes every request a ticket of its own."""
    key = idempotency_key or f"unkeyed:{secrets.token_hex(8)}"
    async with httpx.AsyncClient(timeout=600) as http:
        answer = await http.post(
            os.environ[OFFICE_URL], json={"route": f"{origin}-{destination}", "key": key}
        )
    answer.raise_for_status()
    return str(answer.json()["ticket"])


def refund(paid: Pay, *, idempotency_key: str) -> dict[str, str]:
    return {"refund": f"R-{idempotency_key}", "card": paid.card[-4:]}


async def run(params: Route, ctx: ToolContext) -> dict[str, Any]:
    paid = await ctx.elicit(PAY, message=f"Pay for {params.origin}-{params.destination}")
    if not paid.accepted:
        return {"booked": False}
    ticket = await ctx.step("issue_ticket", issue_ticket, params.origin, params.destination)
    return {"booked": True, "ticket": ticket}


buy_ticket = (
    create_mcp_tool("buy_ticket")
    .description("Buy a ticket: pay, then the ticket office issues it.")
    .parameters(Route)
    .elicits(PAY)
    .commits(PAY, compensate=refund, label="the payment")
    .done_when("booked")
    .execute(run)
)

buy_ticket_plugin = make_plugin(buy_ticket).on(PAY, auto_form).build()


class TicketOffice:
    """The office's books: tickets by key, every request seen, and a gate for its answers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tickets: dict[str, str] = {}
        self.requests: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.reached = threading.Event()
        self.url = ""

    def hold(self) -> None:
        """Answers wait from now until ``release``; ``reached`` is set by the next request."""
        self.reached.clear()
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def issue(self, route: str, key: str) -> str:
        with self.lock:
            self.requests.append(key)
        self.reached.set()
        self.gate.wait()
        with self.lock:
            return self.tickets.setdefault(key, f"T-{route}-{len(self.tickets) + 1:03d}")

    def issued(self, route: str) -> list[str]:
        """The tickets issued for ``route`` (each test books a route of its own)."""
        with self.lock:
            return sorted(t for t in self.tickets.values() if t.startswith(f"T-{route}-"))


@contextmanager
def ticket_office() -> Iterator[TicketOffice]:
    """The office listening on a free loopback port while the block runs."""
    office = TicketOffice()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ticket = office.issue(str(body["route"]), str(body["key"]))
            data = json.dumps({"ticket": ticket}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    office.url = f"http://127.0.0.1:{server.server_address[1]}/tickets"
    thread = threading.Thread(target=server.serve_forever, name="ticket-office", daemon=True)
    thread.start()
    try:
        yield office
    finally:
        office.release()
        server.shutdown()
        server.server_close()
