"""Changing an earlier answer in chromium: at book_flight's review, "Change seat" asks the seat
again; the booking goes on with the new seat and issues exactly one ticket, and the journal
keeps the abandoned branch for operators."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from django.contrib.admin.utils import quote
from playwright.async_api import Browser, expect

from plugins.book_flight.data import seat_map_for
from tests.servers import superuser
from tests.test_browser import (
    ARTIFACTS,
    ask_for_flights,
    expect_confirmation,
    open_chat,
    pick_first_flight,
    review_and_pay,
)
from tests.test_browser_admin_pages import log_in_to_admin


def free_seats(flight_id: str) -> list[str]:
    seat_map = seat_map_for(flight_id)
    return [s["label"] for row in seat_map.grid() for s in row["seats"] if not s["taken"]]


def journal_of(database: Path, ticket: str) -> tuple[str, list[tuple[str, str, int, str]]]:
    """The call that issued ``ticket``, and its journal rows: kind, key, abandoned, result."""
    with sqlite3.connect(database) as db:
        [(call_id,)] = db.execute(
            "SELECT session_id FROM chatbridge_chat_journalrecord WHERE result LIKE ?",
            (f"%{ticket}%",),
        ).fetchall()
        rows = db.execute(
            "SELECT kind, key, abandoned, result FROM chatbridge_chat_journalrecord "
            "WHERE session_id = ? ORDER BY seq",
            (call_id,),
        ).fetchall()
    return call_id, [(kind, key, n, result or "") for kind, key, n, result in rows]


async def test_changing_the_seat_at_the_review_books_one_ticket_with_the_new_seat(
    browser: Browser, server: str, server_database: Path
) -> None:
    page = await open_chat(browser, server)
    await ask_for_flights(page)
    flight_id = await pick_first_flight(page)
    first, second = free_seats(flight_id)[:2]
    await page.get_by_role("button", name=first, exact=True).click()
    review = page.locator(".review")
    await expect(review).to_contain_text(first, timeout=15000)
    # The review offers the earlier answers; the seat card offered the flight.
    change_seat = page.get_by_role("button", name="Change seat")
    await expect(page.get_by_role("button", name="Change flight")).to_be_visible()
    await expect(page.get_by_role("button", name="Don't book")).to_be_visible()
    await expect(page.get_by_role("button", name="Cancel", exact=True)).to_have_count(0)
    await expect(change_seat).to_have_accessible_description(
        "Asks that question again, then what came after it. Nothing already done is done again."
    )
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=ARTIFACTS / "change-review.png", full_page=True)
    await page.set_viewport_size({"width": 390, "height": 844})  # a phone: still reachable
    await change_seat.scroll_into_view_if_needed()
    await expect(change_seat).to_be_in_viewport()
    await page.screenshot(path=ARTIFACTS / "change-review-phone.png")
    await page.set_viewport_size({"width": 1280, "height": 800})

    await change_seat.click()
    await expect(page.get_by_role("group", name="Seats")).to_be_visible(timeout=15000)
    await expect(page.locator(".elicit-card .elicit-message")).to_be_focused()
    # The progress tells where the booking stands again: the flight chosen, no seat held.
    progress = page.locator(".tool-progress .progress-text")
    await expect(progress).to_have_text(re.compile(r"^Selected [A-Z]{2}-\d+$"))
    await page.screenshot(path=ARTIFACTS / "change-seat-again.png", full_page=True)
    await page.get_by_role("button", name=second, exact=True).click()
    await expect(review).to_contain_text(second, timeout=15000)
    await expect(review).not_to_contain_text(f"Seat{first}")

    await review_and_pay(page)
    ticket = await expect_confirmation(page, second)
    assert f"-{second}-" in ticket
    await expect(page.get_by_role("region", name="Booking confirmed")).to_have_count(1)

    call_id, rows = journal_of(server_database, ticket)
    live = [(kind, key) for kind, key, abandoned, _ in rows if not abandoned]
    assert live == [
        ("elicit", "pick_flight"),
        ("elicit", "pick_seat"),
        ("elicit", "review"),
        ("elicit", "payment"),
        ("step", "issue_ticket"),
        ("sample", "sample"),
    ]
    abandoned = [(key, json.loads(result) if result else None) for _, key, n, result in rows if n]
    assert [key for key, _ in abandoned] == ["pick_seat", "review"]  # kept for operators
    seat_row, review_row = abandoned
    assert seat_row[1] is not None and seat_row[1]["content"]["row"] == int(first[:-1])
    assert review_row[1] is None  # asked, left for the change, never answered
    issued = [r for r in rows if r[0] == "step"]
    assert len(issued) == 1  # exactly one ticket

    # An operator reads both branches on the call's admin page.
    name, password = superuser(server_database, "change")
    admin = await browser.new_page()
    await log_in_to_admin(admin, server, (name, password))
    await admin.goto(f"{server}/admin/chatbridge_chat/toolsession/{quote(call_id)}/change/")
    abandoned_rows = admin.get_by_text("abandoned by change 1 (an earlier answer was changed)")
    await expect(abandoned_rows).to_have_count(2)
    await expect(admin.get_by_text("live", exact=True)).to_have_count(len(live))
