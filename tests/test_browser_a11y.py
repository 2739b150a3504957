"""Accessibility in chromium: axe-core on every screen state, in light and dark, and the keyboard.

Each flow runs axe (tests/axe.py: every frame, the sandboxed guest UI included) at each state a
person passes through and fails on any violation of impact serious or moderate. Along the way
it checks what a keyboard user meets: new questions take the focus on their heading, never on
a committing control (Enter, Enter, Enter books nothing); the seat grid is one Tab stop walked
with the arrow keys; the colour picker closes with Esc from inside its frame and from the page.
"""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Browser, Page, expect

from plugins.book_flight.data import search_flights, seat_map_for
from tests.axe import axe_context, check
from tests.test_browser import (
    ARTIFACTS,
    BOOK,
    expect_confirmation,
    fill_payment,
    first_free,
    new_chat,
    send,
)

SCHEMES = pytest.mark.parametrize("scheme", ["light", "dark"])


async def open_chat(browser: Browser, server: str, scheme: str) -> Page:
    context = await axe_context(browser, scheme, viewport={"width": 1100, "height": 900})
    page = await context.new_page()
    await page.goto(server + "/")
    await new_chat(page)
    return page


def question(page: Page, headline: str):
    """The heading of the open question (its message), where focus goes when it is asked."""
    return page.locator(".elicit-message", has_text=headline)


@SCHEMES
async def test_booking_by_keyboard_with_axe_at_each_step(
    browser: Browser, server: str, scheme: str
) -> None:
    page = await open_chat(browser, server, scheme)
    await check(page, "empty chat")

    await send(page, BOOK)
    flights = search_flights("JFK", "LAX")
    selects = page.get_by_role("button", name=re.compile(r"^Select "))
    await expect(selects).to_have_count(len(flights), timeout=15000)
    heading = question(page, "Select your flight")
    await expect(heading).to_be_focused()  # the question, not its first flight
    await check(page, "flight list")
    for _ in range(3):  # Enter, Enter, Enter books nothing
        await page.keyboard.press("Enter")
    await expect(heading).to_be_focused()
    await expect(page.get_by_role("group", name="Seats")).to_have_count(0)

    # The flight list is one Tab stop; the arrow keys walk it.
    await page.keyboard.press("Tab")
    first = page.get_by_role("button", name=f"Select {flights[0].airline} {flights[0].number}")
    second = page.get_by_role("button", name=f"Select {flights[1].airline} {flights[1].number}")
    await expect(first).to_be_focused()
    await page.keyboard.press("ArrowDown")
    await expect(second).to_be_focused()
    await page.keyboard.press("ArrowUp")
    await expect(first).to_be_focused()
    await page.keyboard.press("Enter")

    seat_map = seat_map_for(flights[0].id)
    grid = page.get_by_role("group", name="Seats")
    await expect(grid).to_be_visible(timeout=15000)
    await expect(question(page, "Select your seat")).to_be_focused()
    await check(page, "seat picker")
    for _ in range(3):
        await page.keyboard.press("Enter")
    await expect(page.get_by_role("button", name="Confirm and pay")).to_have_count(0)

    # One Tab stop: Tab enters the grid on the first free seat, the next Tab leaves it.
    seat = first_free(flights[0].id)
    await page.keyboard.press("Tab")
    focused = page.get_by_role("button", name=seat, exact=True)
    await expect(focused).to_be_focused()
    rows = [[s for s in row["seats"] if not s["taken"]] for row in seat_map.grid()]
    free = [s["label"] for row in rows for s in row]
    assert await grid.locator('button[tabindex="0"]').count() == 1
    # A focused seat looks focused (a ring), not chosen (filled).
    looks = await focused.evaluate(
        """b => { const s = getComputedStyle(b), o = getComputedStyle(
             [...b.closest('.seat-grid').querySelectorAll('button.seat:not([disabled])')]
               .find(x => x !== b));
           return {bg: s.backgroundColor, other: o.backgroundColor, ring: s.outlineStyle}; }"""
    )
    assert looks["bg"] == looks["other"] and looks["ring"] == "solid", looks
    ARTIFACTS.mkdir(exist_ok=True)
    await grid.screenshot(path=ARTIFACTS / f"a11y-seat-focus-{scheme}.png")
    await page.keyboard.press("ArrowRight")
    await expect(page.get_by_role("button", name=free[1], exact=True)).to_be_focused()
    await page.keyboard.press("ArrowLeft")
    await page.keyboard.press("ArrowDown")  # same letter, next row with that seat free
    start = next(i for i, row in enumerate(rows) if any(s["label"] == seat for s in row))
    below = next(s["label"] for row in rows[start + 1 :] for s in row if s["letter"] == seat[-1])
    await expect(page.get_by_role("button", name=below, exact=True)).to_be_focused()
    await page.keyboard.press("Control+End")
    await expect(page.get_by_role("button", name=free[-1], exact=True)).to_be_focused()
    await page.keyboard.press("Control+Home")
    await expect(focused).to_be_focused()
    await page.keyboard.press("End")  # the last free seat of the row
    last = rows[start][-1]["label"]
    await expect(page.get_by_role("button", name=last, exact=True)).to_be_focused()
    await page.keyboard.press("Home")
    await expect(focused).to_be_focused()
    await page.keyboard.press("Space")  # picks the focused seat

    confirm = page.get_by_role("button", name="Confirm and pay")
    await expect(confirm).to_be_visible(timeout=15000)
    await expect(confirm).not_to_be_focused()  # the review is read first
    await expect(question(page, "Book ")).to_be_focused()
    await check(page, "review")
    await confirm.click()
    link = page.get_by_role("link", name=re.compile(r"^Continue to secure payment on "))
    await expect(link).to_be_visible(timeout=15000)
    await check(page, "payment card")
    async with page.context.expect_page() as opened:
        await link.click()
    tab = await opened.value
    await expect(tab.get_by_role("heading", name="Secure payment")).to_be_visible()
    await check(tab, "payment page")
    await fill_payment(tab, "4242 4242 4242 4241")
    number = tab.get_by_label("Card number")
    await expect(number).to_have_attribute("aria-invalid", "true")
    await expect(number).to_have_accessible_description(re.compile("check the digits"))
    await expect(number).to_be_focused()
    await check(tab, "payment page with an error")
    await fill_payment(tab)
    await expect(tab.get_by_role("status")).to_contain_text("card ending in 4242")
    await check(tab, "payment done")
    await tab.close()

    await expect_confirmation(page, seat)
    # The booking is done: focus goes to its confirmation, not back to the top of the page.
    await expect(page.get_by_role("heading", name="Booking confirmed")).to_be_focused()
    await check(page, "booking confirmation")
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=ARTIFACTS / f"a11y-confirmation-{scheme}.png", full_page=True)
    # After a reload, the old confirmation does not take the focus from the composer when the
    # next reply arrives.
    await page.reload()
    box = page.get_by_role("textbox", name="Message")
    await expect(box).to_be_focused()
    await send(page, "Hello")
    await expect(page.locator("article.msg.assistant")).to_have_count(2, timeout=15000)
    await expect(page.locator("#chat-status")).to_have_text("", timeout=15000)
    await expect(box).to_be_focused()
    await page.context.close()


@SCHEMES
async def test_forms_cards_picker_and_pages_with_axe(
    browser: Browser, server: str, scheme: str
) -> None:
    page = await open_chat(browser, server, scheme)
    await send(page, "Send feedback")
    approve = page.get_by_role("button", name="Approve send_feedback")
    await expect(approve).to_be_visible(timeout=15000)
    await expect(approve).not_to_be_focused()
    await check(page, "approval card")
    await approve.click()
    topic = page.get_by_label("Topic")
    await expect(topic).to_be_visible(timeout=15000)
    await expect(question(page, "Tell us what you think")).to_be_focused()  # not lost after Approve
    await check(page, "feedback form")

    # A server-side refusal: errors and help are tied to their fields, and the required Topic
    # left empty stays empty (it does not turn into its first choice).
    await page.evaluate("document.querySelectorAll('form').forEach(f => f.noValidate = true)")
    await page.get_by_label("Your name").fill("x")
    await page.get_by_role("textbox", name="Email").fill("ada@example.org")
    await page.get_by_label("Date of your visit").fill("2026-11-20")
    await page.get_by_label("Rating").fill("9")
    await page.locator(".auto-form-submit").click()
    name = page.get_by_label("Your name")
    await expect(name).to_have_attribute("aria-invalid", "true", timeout=15000)
    await expect(name).to_be_focused()  # the first refused field
    await expect(name).to_have_accessible_description(re.compile("at least 2 characters"))
    rating = page.get_by_label("Rating")
    await expect(rating).to_have_accessible_description(re.compile(r"1 \(poor\) to 5 \(great\)"))
    await expect(topic).to_have_value("")
    await expect(topic).to_have_attribute("aria-invalid", "true")
    await check(page, "feedback form with server-side errors")
    await page.get_by_role("button", name="Cancel").click()
    await expect(page.get_by_label("Topic")).to_have_count(0, timeout=15000)
    await expect(page.locator("#chat-status")).to_have_text("", timeout=15000)

    await send(page, "Pick a card")
    cards = page.get_by_role("group", name="Cards").get_by_role("button")
    await expect(cards).to_have_count(5, timeout=15000)
    await expect(question(page, "Pick a card")).to_be_focused()
    rank = (await cards.nth(1).locator(".card-rank").inner_text()).strip()
    await expect(cards.nth(1)).to_have_accessible_name(re.compile(rf"^{re.escape(rank)}\b"))
    await check(page, "cards")
    await page.keyboard.press("Tab")
    await expect(cards.first).to_be_focused()
    await page.keyboard.press("ArrowRight")
    await expect(cards.nth(1)).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator(".result-text")).to_contain_text("You picked the", timeout=15000)
    # The answered question is gone and the turn is over: the focus is back in the composer
    # (not dropped to the top of the page).
    await expect(page.locator("#chat-status")).to_have_text("", timeout=15000)
    await expect(page.get_by_role("textbox", name="Message")).to_be_focused()

    await send(page, "Choose a colour")
    dialog = page.locator("dialog.guest-dialog")
    guest = page.frame_locator("iframe.guest-frame")
    hex_box = guest.get_by_label("Custom colour (hex)")
    await expect(hex_box).to_be_visible(timeout=15000)
    body = guest.locator("body")
    if scheme == "dark":  # the picker follows the page's scheme
        await expect(body).to_have_class("dark")
    else:
        await expect(body).not_to_have_class("dark")
    await hex_box.fill("#zzz")
    await guest.get_by_label("Name (optional)").fill("An-extremely-long-colour-name-" * 2)
    await guest.get_by_role("button", name="Choose").click()
    await expect(guest.get_by_role("alert")).to_be_visible(timeout=15000)
    choose = guest.get_by_role("button", name="Choose")
    await expect(choose).to_be_in_viewport(ratio=1)  # not pushed out by the long refusal
    overflow = await guest.locator("html").evaluate("e => e.scrollWidth - e.clientWidth")
    assert overflow <= 0, f"the picker is {overflow}px wider than its frame"
    await page.screenshot(path=ARTIFACTS / f"a11y-color-picker-{scheme}.png")
    await check(page, "colour picker with a refusal")

    # Esc inside the picker's frame closes the dialog; focus returns to the button that opens it.
    reopen = page.get_by_role("button", name="Open the picker again")
    await hex_box.focus()
    await hex_box.press("Escape")
    await expect(dialog).not_to_have_attribute("open", "")
    await expect(reopen).to_be_focused()
    await reopen.press("Enter")
    await expect(dialog).to_have_attribute("open", "")
    await dialog.focus()
    await page.keyboard.press("Escape")  # and from the page around it
    await expect(dialog).not_to_have_attribute("open", "")
    await expect(reopen).to_be_focused()
    await check(page, "colour picker closed")

    await page.goto(server + "/tools/")
    await expect(page.get_by_role("heading", name="Tools", level=1)).to_be_visible()
    await check(page, "tools page")
    await page.goto(server + "/elicit/not-a-link/")
    await expect(page.get_by_role("heading", name="This link cannot be used")).to_be_visible()
    await check(page, "link refused")
    await page.context.close()
