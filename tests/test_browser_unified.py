"""Seed 002 in the browser: pick_card, two tools waiting at once, approvals, auto forms."""

from __future__ import annotations

import re

from playwright.async_api import Browser, expect

from tests.test_browser import ARTIFACTS, open_chat, review_and_pay, send


async def test_pick_card_in_the_browser(browser: Browser, server: str) -> None:
    page = await open_chat(browser, server)
    await send(page, "Pick a card")
    cards = page.get_by_role("group", name="Cards").get_by_role("button")
    await expect(cards).to_have_count(5, timeout=15000)
    label = await cards.nth(3).get_attribute("aria-label") or ""
    rank = await cards.nth(3).locator(".card-rank").text_content() or ""
    # The accessible name starts with what the card shows, then says it in words.
    assert label.startswith(rank), (label, rank)
    name = label.split(" — ")[-1]
    await expect(page.locator(".elicit-message", has_text="Pick a card")).to_be_focused()
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=ARTIFACTS / "pick-card.png", full_page=True)
    await cards.nth(3).click()
    await expect(page.locator(".result-text")).to_have_text(
        f"You picked the {name}.", timeout=15000
    )


async def test_two_tools_waiting_at_once_are_both_answerable(browser: Browser, server: str) -> None:
    page = await open_chat(browser, server)
    await send(page, "Book a flight from JFK to LAX and pick a card")
    select = page.get_by_role("button", name=re.compile(r"^Select "))
    cards = page.get_by_role("group", name="Cards").get_by_role("button")
    await expect(select.first).to_be_visible(timeout=15000)
    await expect(cards.first).to_be_visible(timeout=15000)
    await select.first.click()  # the flight first, then the card
    await expect(page.get_by_role("group", name="Seats")).to_be_visible(timeout=15000)
    await cards.first.click()
    await expect(page.locator(".result-text")).to_contain_text("You picked the", timeout=15000)
    await page.locator("button.seat:not([disabled])").first.click()
    await review_and_pay(page)
    await expect(page.get_by_role("region", name="Booking confirmed")).to_be_visible(timeout=15000)


async def test_approve_and_the_auto_form_with_server_side_errors(
    browser: Browser, server: str
) -> None:
    page = await open_chat(browser, server)
    await send(page, "Send feedback")
    approve = page.get_by_role("button", name="Approve send_feedback")
    await expect(approve).to_be_visible(timeout=15000)
    await expect(page.get_by_role("region", name="Approve send_feedback?")).to_contain_text(
        "send_feedback needs your approval"
    )
    await approve.click()
    await expect(page.get_by_label("Your name")).to_be_visible(timeout=15000)
    await expect(page.get_by_role("region", name="Approve send_feedback?")).to_have_count(0)
    # What a browser would refuse to send is still refused by the server.
    await page.evaluate("document.querySelectorAll('form').forEach(f => f.noValidate = true)")
    await page.get_by_label("Your name").fill("x")
    await page.get_by_role("textbox", name="Email").fill("not-an-email")
    await page.get_by_label("Date of your visit").fill("2026-11-20")
    await page.get_by_label("Rating").fill("9")
    await page.get_by_label("Topic").select_option("idea")
    await page.locator(".auto-form-submit").click()
    for message in (
        "Your name: Enter at least 2 characters",
        "Rating: Enter a number from 1 to 5",
    ):
        await expect(page.get_by_role("alert").filter(has_text=message)).to_be_visible(
            timeout=15000
        )
    await expect(page.get_by_label("Rating")).to_have_value("9")  # what was typed is kept
    await page.get_by_label("Your name").fill("Ada")
    await page.get_by_role("textbox", name="Email").fill("ada@example.org")
    await page.get_by_label("Rating").fill("5")
    await page.get_by_role("radio", name="phone").check()
    await page.get_by_role("checkbox", name="mcp").check()
    await page.get_by_label("Subscribe to the newsletter").check()
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=ARTIFACTS / "auto-form.png", full_page=True)
    await page.locator(".auto-form-submit").click()
    result = page.locator(".tool-card:has([data-tool=send_feedback])").locator(".tool-result")
    await expect(result).to_contain_text("FB-", timeout=15000)
    areas = result.locator("xpath=.//dt[normalize-space()='Areas']/following-sibling::dd[1]")
    await expect(areas).to_have_text("mcp")  # a definition list, not a dict
    await expect(result).not_to_contain_text("'areas'")


async def test_deny_with_a_reason(browser: Browser, server: str) -> None:
    page = await open_chat(browser, server)
    await send(page, "Send feedback")
    await page.get_by_label("Reason (optional)").fill("not now")
    await page.get_by_role("button", name="Deny send_feedback").click()
    await expect(page.locator(".status-denied")).to_have_text("Denied", timeout=15000)
    await expect(page.get_by_text("You did not allow this to run: not now")).to_be_visible()
    reply = page.locator("article.msg.assistant").last
    await expect(reply).to_contain_text("OK, I did not send the feedback, as you asked.")
