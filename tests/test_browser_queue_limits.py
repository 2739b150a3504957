"""Caps in chromium: "Send anyway" past the chat's cap is refused in words, the composer keeps
the text, and the queued message already there stays queued; a tab past the browser's cap on
open chat pages says why and what to do, and keeps its draft for when it can connect."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.async_api import Browser, expect

from tests.servers import daphne_site
from tests.test_browser import ask_for_flights, open_chat

pytestmark = pytest.mark.slow  # a server process of its own


@pytest.fixture(scope="module")
def capped_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server keeping one queued message per chat, and two chat pages per browser (set from
    the environment)."""
    with daphne_site(
        tmp_path_factory.mktemp("capped"),
        CHATBRIDGE_QUEUE_PER_CONVERSATION="1",
        CHATBRIDGE_SOCKETS_PER_VISITOR="2",
    ) as base:
        yield base


async def test_send_anyway_past_the_cap_is_refused_and_the_text_stays(
    browser: Browser, capped_server: str
) -> None:
    page = await open_chat(browser, capped_server)
    box = page.get_by_role("textbox", name="Message")
    await ask_for_flights(page)
    anyway = page.get_by_role("button", name="Send anyway")

    await box.fill("And a hotel in LA, please")
    await anyway.click()
    queued = page.locator("#queued article.msg.queued")
    await expect(queued).to_contain_text("And a hotel in LA, please")
    await expect(box).to_have_value("")

    await box.fill("And a car")
    await anyway.click()
    await expect(page.locator("#errors")).to_contain_text(
        "1 message is already waiting in this chat, the most it keeps. Wait for the current "
        "reply to end, then send this again."
    )
    await expect(box).to_have_value("And a car")
    await expect(queued).to_have_count(1)
    await page.reload()  # on record: the one queued message, still alone
    await expect(page.locator("#queued article.msg.queued")).to_have_count(1)
    await expect(page).to_have_title(re.compile("^Your answer is needed"))


async def test_a_tab_past_the_browsers_cap_on_chat_pages_says_why_and_keeps_its_draft(
    browser: Browser, capped_server: str
) -> None:
    context = await browser.new_context()  # one browser: its tabs share the cookie
    first = await context.new_page()
    await first.goto(capped_server + "/")
    await expect(first.locator("#connection-state")).to_have_text("Connected")
    second = await context.new_page()
    await second.goto(first.url)
    await expect(second.locator("#connection-state")).to_have_text("Connected")

    third = await context.new_page()
    await third.goto(first.url)
    await expect(third.locator("#errors [role=alert]")).to_have_text(
        "You have 2 chat pages open in this browser, the most you may have at once. Close some "
        "of them, then reload this page."
    )
    state = third.locator("#connection-state")
    await expect(state).to_have_text("Disconnected — reload the page to connect again")
    box = third.get_by_role("textbox", name="Message")
    await box.fill("Written while refused")
    await first.close()  # as the words say: one closed, then a reload
    await third.reload()
    await expect(state).to_have_text("Connected")
    await expect(box).to_have_value("Written while refused")  # the draft survived the reload
    await context.close()
