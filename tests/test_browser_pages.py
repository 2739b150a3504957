"""The chat's pages in a browser: the empty state, Markdown replies, managing chats in the
sidebar, a tool card's log and progress after a reload, the favicon and the not-found page.

Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import re
import uuid

from playwright.async_api import Browser, Locator, Page, expect

from plugins.book_flight.data import search_flights
from tests.test_browser import ARTIFACTS, BOOK, new_chat, open_chat


async def _item(page: Page, title: str) -> Locator:
    """The sidebar's list item of the chat called ``title`` (whatever it shows later)."""
    nav = page.get_by_role("navigation", name="Conversations")
    href = await nav.get_by_role("link", name=title, exact=True).get_attribute("href")
    assert href is not None
    return page.locator(f"#conv-item-{href.strip('/').split('/')[-1]}")


async def _settled(item: Locator) -> None:
    """htmx has wired the content it swapped in (it does so a moment after the swap; a key
    pressed before then would submit the plain form, which opens the action's own page)."""
    await expect(item.locator(".htmx-added")).to_have_count(0)


async def test_empty_state_markdown_and_managing_chats(browser: Browser, server: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page = await open_chat(browser, server, viewport={"width": 1280, "height": 900})

    # A favicon, served.
    icon = await page.locator('link[rel="icon"]').get_attribute("href")
    assert icon is not None and icon.endswith(".svg")
    served = await page.request.get(server + icon)
    assert served.ok and served.headers["content-type"].startswith("image/svg")

    # The empty state speaks to a person and offers prompts, not snake_case tool names.
    empty = page.get_by_role("region", name="What can I help you with?")
    await expect(empty).to_be_visible()
    for prompt in (BOOK, "Pick a card", "Choose a colour", "Send feedback"):
        await expect(empty.get_by_role("button", name=prompt, exact=True)).to_be_visible()
    assert "_" not in await empty.inner_text()
    await page.screenshot(path=ARTIFACTS / "pages-empty-state.png")

    # A reply in Markdown shows as a list, not as dashes and asterisks.
    box = page.get_by_role("textbox", name="Message")
    await box.fill("hello")
    await box.press("Enter")
    reply = page.locator("article.msg.assistant").last
    await expect(reply.get_by_role("listitem")).to_have_count(4, timeout=15000)
    await expect(reply.get_by_role("listitem").first).to_contain_text("book_flight: Book")
    await expect(empty).to_be_hidden()
    hello_url = page.url

    # New chat: a fresh chat; pressed again, the same one (no pile of empty chats).
    await new_chat(page)
    await expect(page).not_to_have_url(hello_url)
    fresh_url = page.url
    await new_chat(page)
    await expect(page.get_by_role("region", name="What can I help you with?")).to_be_visible()
    assert page.url == fresh_url
    nav = page.get_by_role("navigation", name="Conversations")
    await expect(nav.get_by_role("link")).to_have_count(2)

    # An example prompt is sent as it is; the tool's log and progress survive a reload.
    await page.get_by_role("button", name=BOOK, exact=True).click()
    await expect(page.locator("#transcript").get_by_text(BOOK, exact=True)).to_be_visible()
    await expect(page.locator("#empty-chat")).to_have_count(0)  # gone with the first message
    # The button it took away did not take the focus with it.
    assert await page.evaluate("document.activeElement !== document.body")
    flights = len(search_flights("JFK", "LAX"))
    await expect(page.get_by_role("button", name=re.compile(r"^Select "))).to_have_count(
        flights, timeout=15000
    )
    await page.reload()
    select = page.get_by_role("button", name=re.compile(r"^Select "))
    await expect(select).to_have_count(flights, timeout=15000)  # the open question is back
    await expect(select.first).not_to_be_focused()  # no committing control takes the focus
    card = page.locator("article.tool-card")
    await expect(card.locator(".tool-log")).to_contain_text("Searching flights")
    await expect(card.locator(".tool-progress")).to_contain_text(f"Found {flights} flights")
    await expect(card.locator("progress")).to_have_attribute("value", re.compile(r"^1(\.0)?$"))

    # A chat whose tool is still waiting is not deleted: it says why, and Esc goes back.
    booking = await _item(page, BOOK)
    await booking.get_by_role("button", name="Delete", exact=True).click()
    refusal = booking.get_by_role("alert")
    await expect(refusal).to_contain_text("cannot be deleted yet")
    await expect(refusal).to_be_focused()
    await _settled(booking)
    await page.keyboard.press("Escape")
    rename = booking.get_by_role("button", name="Rename", exact=True)
    await expect(rename).to_be_focused()
    await _settled(booking)

    # Rename with the keyboard only.
    await page.keyboard.press("Enter")
    name = booking.get_by_role("textbox", name="Name of this chat")
    await expect(name).to_be_focused()
    await expect(name).to_have_value(BOOK)
    await page.screenshot(path=ARTIFACTS / "pages-rename.png")
    await name.fill("Trip to LA")
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("link", name="Trip to LA", exact=True)).to_have_attribute(
        "aria-current", "page"
    )
    assert page.url == fresh_url

    # Delete another chat after confirming; Cancel first leaves it alone.
    hello = await _item(page, "hello")
    await _settled(hello)  # drawn again since the page loaded, it may not be wired yet
    await hello.get_by_role("button", name="Delete", exact=True).click()
    question = hello.get_by_text("Delete “hello”?")
    await expect(question).to_be_focused()
    await hello.get_by_role("link", name="Cancel").click()
    await expect(hello.get_by_role("button", name="Rename", exact=True)).to_be_focused()
    await _settled(hello)
    await hello.get_by_role("button", name="Delete", exact=True).click()
    await page.screenshot(path=ARTIFACTS / "pages-delete.png")
    await _settled(hello)
    await hello.get_by_role("button", name="Delete this chat").click()
    await expect(page.get_by_role("link", name="hello", exact=True)).to_have_count(0)
    assert page.url == fresh_url
    await expect(nav.get_by_role("link")).to_have_count(1)
    assert (await page.request.get(hello_url)).status == 404

    # An unknown conversation: a page for people, with a way back.
    response = await page.goto(f"{server}/c/{uuid.uuid4()}/")
    assert response is not None and response.status == 404
    await expect(
        page.get_by_role("heading", name="This conversation does not exist or is not yours")
    ).to_be_visible()
    await page.screenshot(path=ARTIFACTS / "pages-not-found.png")
    await page.get_by_role("link", name="Back to your chats").click()
    await expect(page.get_by_role("link", name="Trip to LA", exact=True)).to_be_visible()
    await page.close()
