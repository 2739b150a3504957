"""The chat in a real browser: Debian's chromium driven by Playwright against a real daphne.

Screenshots of both pickers and the confirmation, at desktop and phone widths in light and dark,
are written to ``test-artifacts/``.
"""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Browser, Page, Response, expect

from plugins.book_flight.data import search_flights, seat_map_for
from tests.servers import ROOT

ARTIFACTS = ROOT / "test-artifacts"
BOOK = "Book a flight from JFK to LAX"
TICKET = re.compile(r"CB-[A-Z]{2}\d{3}-\d{1,2}[A-F]-[0-9A-F]{10}")


async def new_chat(page: Page) -> None:
    """Press "New chat" and wait for the chat it opens. Its address is often the one shown (an
    empty chat is reused), so the old page's composer would pass for the new one: what is typed
    next would go to a page being left (it comes back as the new page's draft, never sent)."""
    async with page.expect_event("load"):  # the new page, its deferred scripts run
        await page.get_by_role("button", name="New chat").click()
    await expect(page.get_by_role("textbox", name="Message")).to_be_visible()


async def open_chat(browser: Browser, server: str, **options: object) -> Page:
    page = await browser.new_page(**options)  # type: ignore[arg-type]
    await page.goto(server + "/")
    await new_chat(page)
    return page


async def open_watched_chat(browser: Browser, server: str) -> tuple[Page, list[str]]:
    """A new chat, loaded again with every response watched: the page, and the requests that
    failed (status 400 or more), as they come."""
    failed: list[str] = []

    def check(response: Response) -> None:
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    page = await open_chat(browser, server)
    page.on("response", check)
    await page.reload()  # every request of a page load is watched
    return page, failed


async def send(page: Page, text: str) -> None:
    """Type ``text`` in the composer and send it with Enter."""
    box = page.get_by_role("textbox", name="Message")
    await box.fill(text)
    await box.press("Enter")  # Enter sends


async def ask_for_flights(page: Page) -> None:
    await send(page, BOOK)
    await expect(page.get_by_role("button", name=re.compile(r"^Select "))).to_have_count(
        len(search_flights("JFK", "LAX")), timeout=15000
    )


async def pick_first_flight(page: Page) -> str:
    flight = search_flights("JFK", "LAX")[0]
    await page.get_by_role("button", name=f"Select {flight.airline} {flight.number}").click()
    await expect(page.get_by_role("group", name="Seats")).to_be_visible(timeout=15000)
    return flight.id


def first_free(flight_id: str) -> str:
    seat = seat_map_for(flight_id).first_free()
    assert seat is not None
    return seat


TEST_CARD_TYPED = "4242 4242 4242 4242"  # Visa's test number, as a person types it


async def fill_payment(tab: Page, number: str = TEST_CARD_TYPED) -> None:
    """Fill book_flight's payment page (a URL question's page) in ``tab`` and pay."""
    await tab.get_by_label("Name on card").fill("Ada Lovelace")
    await tab.get_by_label("Card number").fill(number)
    await tab.get_by_label("Expiry (MM/YY)").fill("12/39")
    await tab.get_by_label("Security code").fill("123")
    await tab.get_by_role("button", name=re.compile(r"^Pay")).click()


async def review_and_pay(page: Page) -> None:
    """After the seat: confirm the review, then pay on the page the payment card links to, in
    the new tab it opens (closed once paid: the chat goes on by itself)."""
    await page.get_by_role("button", name="Confirm and pay").click(timeout=15000)
    link = page.get_by_role("link", name=re.compile(r"^Continue to secure payment on "))
    async with page.context.expect_page() as opened:
        await link.click(timeout=15000)
    tab = await opened.value
    await fill_payment(tab)
    await expect(tab.get_by_role("status")).to_contain_text("card ending in 4242")
    await tab.close()


async def expect_confirmation(page: Page, seat: str) -> str:
    confirmation = page.get_by_role("region", name="Booking confirmed")
    await expect(confirmation).to_be_visible(timeout=15000)
    await expect(confirmation).to_contain_text("confirmed")
    ticket = (await confirmation.locator(".ticket").inner_text()).strip()
    assert TICKET.fullmatch(ticket), ticket
    await expect(confirmation).to_contain_text(seat)
    await expect(confirmation).to_contain_text("Tip:")
    await expect(page.locator("article.msg.assistant").last).to_contain_text(ticket, timeout=15000)
    return ticket


async def test_booking_a_flight_from_the_chat(browser: Browser, server: str) -> None:
    page = await open_chat(browser, server)
    await ask_for_flights(page)
    await expect(page.locator("#transcript").get_by_text(BOOK, exact=True)).to_be_visible()
    # The sidebar names the conversation after its first message.
    await expect(page.get_by_role("link", name=BOOK)).to_have_attribute("aria-current", "page")
    first = search_flights("JFK", "LAX")[0]
    select = page.get_by_role("button", name=f"Select {first.airline} {first.number}")
    # Focus moves to the new question's heading, never to a control that commits.
    await expect(page.locator(".elicit-message", has_text="Select your flight")).to_be_focused()
    await expect(select).not_to_be_focused()
    card = page.locator("li.flight-card").first
    for text in (first.airline, first.number, first.departs, first.duration, f"${first.price_usd}"):
        await expect(card).to_contain_text(text)

    flight_id = await pick_first_flight(page)
    seat_map = seat_map_for(flight_id)
    await expect(page.get_by_role("button", name=seat_map.taken[0], exact=True)).to_be_disabled()
    seat = first_free(flight_id)
    free = page.get_by_role("button", name=seat, exact=True)
    await expect(free).to_be_enabled()
    await expect(free).to_have_attribute("tabindex", "0")  # the grid's Tab stop, not focused
    await expect(page.locator(".elicit-card .elicit-message")).to_be_focused()
    await expect(page.locator(".exit-row").first).to_contain_text("Exit")
    await expect(page.locator("progress").first).to_be_visible()
    await free.click()
    await review_and_pay(page)
    await expect_confirmation(page, seat)
    await expect(page.locator(".status-completed")).to_have_text("Done")


async def test_reloading_in_the_middle_and_finishing(browser: Browser, server: str) -> None:
    page = await open_chat(browser, server)
    await ask_for_flights(page)
    await page.reload()
    # The transcript is back, and so is the pending form.
    await expect(page.locator("#transcript").get_by_text(BOOK, exact=True)).to_be_visible()
    flight_id = await pick_first_flight(page)
    await page.reload()
    seat = first_free(flight_id)
    await page.get_by_role("button", name=seat, exact=True).click(timeout=15000)
    await review_and_pay(page)
    await expect_confirmation(page, seat)


async def test_a_taken_seat_shows_an_inline_error(browser: Browser, server: str) -> None:
    page = await open_chat(browser, server)
    await ask_for_flights(page)
    flight_id = await pick_first_flight(page)
    taken = seat_map_for(flight_id).taken[0]
    button = page.get_by_role("button", name=taken, exact=True)
    # The seat was free when the page was drawn and taken since: the server must refuse it.
    await button.evaluate("b => { b.disabled = false }")
    await button.click()
    alert = page.get_by_role("alert").filter(has_text=f"Seat {taken} is taken; choose another.")
    await expect(alert).to_be_visible(timeout=15000)
    seat = first_free(flight_id)
    await page.get_by_role("button", name=seat, exact=True).click()
    await review_and_pay(page)
    await expect_confirmation(page, seat)


async def test_decline_and_abort_buttons(browser: Browser, server: str) -> None:
    page = await open_chat(browser, server)
    await ask_for_flights(page)
    await page.get_by_role("button", name="Decline").click()
    await expect(page.get_by_text("Not booked: flight selection declined")).to_be_visible(
        timeout=15000
    )
    declined = page.locator("article.tool-card").last
    # Its progress ("Found 5 flights") told of a booking that did not happen: it is gone,
    # and the person's own decline is not shown as an error.
    await expect(declined.locator(".tool-progress")).to_be_empty()
    said = declined.get_by_text("Not booked: flight selection declined")
    colour = await said.evaluate("b => getComputedStyle(b).color")
    danger = await page.evaluate(
        "() => { const e = document.createElement('span'); e.style.color = 'var(--danger)';"
        " document.body.append(e); const c = getComputedStyle(e).color; e.remove(); return c; }"
    )
    assert danger.startswith("rgb") and colour != danger, (colour, danger)
    await page.screenshot(path=ARTIFACTS / "declined-booking.png", full_page=True)
    # The reply to the declined call ends the turn; a message sent before that is BUSY.
    await expect(page.locator("#chat-status")).to_have_text("", timeout=15000)

    await ask_for_flights(page)
    await page.get_by_role("button", name="Abort").click()
    await page.get_by_role("button", name="Yes, abort").click()  # Abort asks first
    aborted = page.locator("article.tool-card", has=page.locator(".status-aborted"))
    await expect(aborted).to_have_count(1, timeout=15000)
    await expect(aborted.locator(".status")).to_have_text("Stopped by you")
    await expect(aborted.locator(".tool-result")).to_have_text(
        "You stopped this before it finished."
    )


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(
    ("device", "width", "height"), [("desktop", 1280, 900), ("phone", 390, 844)]
)
async def test_screenshots_of_pickers_and_confirmation(
    browser: Browser, server: str, device: str, width: int, height: int, scheme: str
) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page = await open_chat(
        browser, server, viewport={"width": width, "height": height}, color_scheme=scheme
    )

    async def snap(name: str) -> None:
        overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name}: the page is {overflow}px wider than the {device} screen"
        await page.screenshot(path=ARTIFACTS / f"{name}-{device}-{scheme}.png", full_page=True)

    await ask_for_flights(page)
    await snap("flight-list")
    flight_id = await pick_first_flight(page)
    await snap("seat-picker")
    seat = first_free(flight_id)
    await page.get_by_role("button", name=seat, exact=True).click()
    await review_and_pay(page)
    await expect_confirmation(page, seat)
    await snap("confirmation")
    background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    dark = sum(int(c) for c in re.findall(r"\d+", background)[:3]) < 3 * 128
    assert dark is (scheme == "dark"), background
