"""The chat in chromium against the app started the production way (docs/production.md)."""

from __future__ import annotations

from playwright.async_api import Browser

from tests.production import Production
from tests.test_browser import (
    ask_for_flights,
    expect_confirmation,
    first_free,
    open_watched_chat,
    pick_first_flight,
    review_and_pay,
)


async def test_a_booking_works_in_the_browser_on_the_production_server(
    browser: Browser, production: Production
) -> None:
    chat, failed = await open_watched_chat(browser, production.url)
    # htmx and its WebSocket extension came from the collected static files
    assert await chat.evaluate("typeof htmx") == "object"
    await ask_for_flights(chat)
    flight_id = await pick_first_flight(chat)
    seat = first_free(flight_id)
    await chat.get_by_role("button", name=seat, exact=True).click()
    await review_and_pay(chat)
    await expect_confirmation(chat, seat)
    assert "?" not in chat.url  # the composer never fell back to a GET form
    assert failed == []
