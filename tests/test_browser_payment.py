"""book_flight's URL question in chromium: the chat's card opens the payment page in a new tab;
paying there resumes the chat in the first tab, which never sees the card number."""

from __future__ import annotations

import re

from playwright.async_api import Browser, expect

from tests.test_browser import (
    ARTIFACTS,
    TEST_CARD_TYPED,
    ask_for_flights,
    expect_confirmation,
    fill_payment,
    first_free,
    open_chat,
    pick_first_flight,
)


async def test_paying_in_a_new_tab_resumes_the_chat(browser: Browser, server: str) -> None:
    chat = await open_chat(browser, server)
    await ask_for_flights(chat)
    seat = first_free(await pick_first_flight(chat))
    await chat.get_by_role("button", name=seat, exact=True).click()
    await chat.get_by_role("button", name="Confirm and pay").click(timeout=15000)

    host = server.removeprefix("http://")
    link = chat.get_by_role("link", name=f"Continue to secure payment on {host}")
    await expect(link).to_have_attribute("target", "_blank", timeout=15000)
    ARTIFACTS.mkdir(exist_ok=True)
    await chat.screenshot(path=ARTIFACTS / "payment-card.png", full_page=True)
    async with chat.context.expect_page() as opened:
        await link.click()
    tab = await opened.value
    await expect(tab.get_by_role("heading", name="Secure payment")).to_be_visible()
    url = tab.url
    await fill_payment(tab, "4242 4242 4242 4241")  # a typo: the page says so, in words
    await expect(tab.get_by_role("alert").filter(has_text="check the digits")).to_be_visible()
    await tab.screenshot(path=ARTIFACTS / "payment-page-refused.png", full_page=True)
    await expect(tab.get_by_label("Card number")).to_have_value("")  # not shown back
    await fill_payment(tab)
    await expect(tab.get_by_role("status")).to_have_text(
        re.compile(r"Paid \$\d+ with the card ending in 4242\.")
    )

    await expect_confirmation(chat, seat)  # the first tab went on by itself
    await expect(chat.locator(".confirmation .paid")).to_have_text("card ····4242")
    await chat.screenshot(path=ARTIFACTS / "payment-done.png", full_page=True)
    await expect(link).to_have_count(0)  # the card with the link is closed
    html = await chat.content()
    for number in (TEST_CARD_TYPED, TEST_CARD_TYPED.replace(" ", "")):
        assert number not in html

    await tab.goto(url)  # the link a second time: used up
    await expect(tab.get_by_role("alert")).to_contain_text("already used")
    await tab.close()
