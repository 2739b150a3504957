"""A message's actions in chromium, with the keyboard: copy a message, edit one and send it
again (the earlier version folds away and stays readable, on the page and after a reload),
regenerate the last reply. Each control has a name and is announced."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, Page, expect

from tests.axe import axe_context, check
from tests.test_browser import ARTIFACTS, new_chat, open_chat, send


async def exchange(page: Page, text: str, count: int) -> None:
    """Send ``text`` and wait for the ``count``-th reply of the page."""
    await send(page, text)
    replies = page.locator("#transcript > article.msg.assistant")
    await expect(replies).to_have_count(count, timeout=15000)
    await expect(page.locator("#chat-status")).to_have_text("", timeout=15000)


async def test_copy_edit_and_regenerate_from_the_keyboard(browser: Browser, server: str) -> None:
    page = await open_chat(browser, server)
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    await exchange(page, "Hello there", 1)
    mine = page.locator("#transcript > article.msg.user").first

    # Copy, by keyboard: Tab reaches the message's actions.
    copy = mine.get_by_role("button", name="Copy")
    await copy.focus()
    await expect(copy).to_be_visible()
    await page.keyboard.press("Enter")
    await expect(page.locator("#announcer")).to_have_text("Copied")
    assert await page.evaluate("navigator.clipboard.readText()") == "Hello there"

    # Edit: the form takes the place of the text; Esc gives the focus back to Edit.
    edit = mine.get_by_role("button", name="Edit")
    await edit.focus()
    await page.keyboard.press("Enter")
    box = mine.get_by_role("textbox", name="Edit your message")
    await expect(box).to_be_focused()
    await expect(box).to_have_value("Hello there")
    await expect(edit).to_have_attribute("aria-expanded", "true")
    await page.keyboard.press("Escape")
    await expect(edit).to_be_focused()
    await expect(box).to_be_hidden()

    await page.keyboard.press("Enter")
    await box.fill("What can you do?")
    await mine.get_by_role("button", name="Send").click()
    earlier = page.locator("details.earlier-version")
    await expect(earlier).to_have_count(1, timeout=15000)
    await expect(earlier).not_to_have_attribute("open", "")
    await expect(earlier.locator("summary")).to_have_text("Earlier version")
    await expect(earlier.locator("article.msg")).to_have_count(2)  # my message and its reply
    await expect(page.locator("#transcript > article.msg.user .bubble")).to_have_text(
        "What can you do?"
    )
    await expect(page.locator("#transcript > article.msg.assistant")).to_have_count(
        1, timeout=15000
    )
    await expect(page.locator("#chat-status")).to_have_text("", timeout=15000)
    await earlier.locator("summary").click()
    kept = earlier.locator("article.msg.user .bubble")
    await expect(kept).to_be_visible()
    await expect(kept).to_have_text("Hello there")
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=ARTIFACTS / "message-edited.png", full_page=True)

    # Regenerate: only the last reply offers it.
    reply = page.locator("#transcript > article.msg.assistant").last
    first_id = await reply.get_attribute("id")
    await reply.hover()
    await reply.get_by_role("button", name="Regenerate").click()
    await expect(page.locator("details.earlier-version")).to_have_count(2, timeout=15000)
    again = page.locator("#transcript > article.msg.assistant").last
    await expect(again).not_to_have_id(first_id or "")
    await expect(page.locator("#chat-status")).to_have_text("", timeout=15000)
    await expect(
        page.locator("details.earlier-version").last.get_by_role("button", name="Regenerate")
    ).to_be_hidden()

    # A reload shows the same thing, from the record.
    await page.reload()
    await expect(page.locator("details.earlier-version")).to_have_count(2)
    await expect(page.locator("#transcript > article.msg")).to_have_count(2)
    await page.screenshot(path=ARTIFACTS / "message-edited-reloaded.png", full_page=True)


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_message_actions_and_an_earlier_version_pass_axe(
    browser: Browser, server: str, scheme: str
) -> None:
    context = await axe_context(browser, scheme, viewport={"width": 1100, "height": 900})
    page = await context.new_page()
    await page.goto(server + "/")
    await new_chat(page)
    await exchange(page, "Hello there", 1)
    mine = page.locator("#transcript > article.msg.user").first
    await mine.get_by_role("button", name="Edit").click()
    await check(page, "a message being edited")
    await mine.get_by_role("textbox", name="Edit your message").fill("What can you do?")
    await mine.get_by_role("button", name="Send").click()
    earlier = page.locator("details.earlier-version")
    await expect(earlier).to_have_count(1, timeout=15000)
    await expect(page.locator("#chat-status")).to_have_text("", timeout=15000)
    await earlier.locator("summary").click()
    await (
        page.locator("#transcript > article.msg.assistant")
        .last.get_by_role("button", name="Copy")
        .focus()
    )
    await check(page, "an earlier version open, a reply's actions shown")
    await context.close()
