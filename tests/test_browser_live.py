"""The chat page follows the conversation (issue 15), checked in chromium as a person would:
the scroll position, "Jump to latest", a reload at the latest message, a composer that keeps
what was typed (BUSY, queued as the next turn, a draft across a reload), the Stop button, the
tab title, where the focus goes, and the polite announcements."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from tests.servers import daphne_site
from tests.test_browser import ARTIFACTS, BOOK, ask_for_flights, new_chat, open_chat

AT_BOTTOM = "() => window.scrollY + window.innerHeight >= document.documentElement.scrollHeight - 2"
HELP_START = "I'm the offline assistant."
AXE = Path(__file__).parent / "clients" / "node_modules" / "axe-core" / "axe.min.js"


async def assert_accessible(page: Page, state: str) -> None:
    """axe-core finds nothing serious or moderate in what this part adds to the page."""
    if not await page.evaluate("typeof axe !== 'undefined'"):
        # Through DevTools, not a <script> in the page: the chat's policy runs nothing inline.
        await page.evaluate(AXE.read_text(encoding="utf-8"))
    found = await page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
            .filter(v => v.impact === "serious" || v.impact === "moderate")
            .map(v => ({id: v.id, nodes: v.nodes.map(n => n.target.join(" "))}))"""
    )
    mine = ("composer", "message-box", "queued", "jump-latest", "announcer", "stop-reply", "choice")
    ours = [v for v in found if any(any(m in n for m in mine) for n in v["nodes"])]
    assert not ours, f"{state}: {ours}"


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server whose offline model writes slowly (a pause between pieces), to be stopped."""
    with daphne_site(
        tmp_path_factory.mktemp("slow"), CHATBRIDGE_OFFLINE_STREAM_DELAY="0.25"
    ) as base:
        yield base


def composer(page: Page):
    return page.get_by_role("textbox", name="Message")


async def say(page: Page, text: str, replies: int) -> None:
    """Send ``text`` with Enter and wait for the ``replies``-th reply of the assistant."""
    await composer(page).fill(text)
    await composer(page).press("Enter")
    await expect(page.locator("#transcript article.msg.assistant")).to_have_count(
        replies,
        timeout=30000,  # a busy machine's first page and reply
    )


async def test_the_transcript_follows_and_a_reload_opens_at_the_latest(
    browser: Browser, server: str
) -> None:
    context = await browser.new_context(viewport={"width": 1000, "height": 600})
    page = await context.new_page()  # a second tab of the same browser comes later
    await page.goto(server + "/")
    await new_chat(page)
    box = composer(page)
    await expect(page).to_have_title("New chat · ChatBridge")
    for n in range(1, 5):  # the offline model's help is a few lines: the chat grows long
        await say(page, "hello", n)
        await expect(box).to_have_value("")  # cleared once the server echoed it
        await expect(box).to_be_focused()  # the focus stays in the composer
        await page.wait_for_function(AT_BOTTOM)  # and the page follows the reply
    await expect(page).to_have_title("hello · ChatBridge")  # retitled after the first message
    await expect(page.locator("#announcer")).to_have_text("The assistant replied.")
    assert await page.locator("#transcript").get_attribute("aria-live") is None
    height = await page.evaluate("document.documentElement.scrollHeight")
    assert height > 1200, height

    # Scrolled up, the page stays put when new content arrives (here from another tab) ...
    await page.mouse.move(500, 300)
    await page.mouse.wheel(0, -5000)
    await page.wait_for_function("() => window.scrollY < 10")
    other = await page.context.new_page()
    await other.goto(page.url)
    await say(other, "help", 5)
    await expect(page.locator("#transcript article.msg.assistant")).to_have_count(5)
    jump = page.get_by_role("button", name="Jump to latest")
    await expect(jump).to_be_visible()
    assert await page.evaluate("window.scrollY") < 10
    await page.screenshot(path=ARTIFACTS / "live-jump-to-latest.png")
    await assert_accessible(page, "scrolled up, Jump to latest shown")
    # ... and "Jump to latest" is reachable from the composer by keyboard.
    await box.focus()
    await page.keyboard.press("Shift+Tab")
    await expect(jump).to_be_focused()
    await page.keyboard.press("Enter")
    await page.wait_for_function(AT_BOTTOM)
    await expect(jump).to_be_hidden()
    await expect(box).to_be_focused()

    # A reload opens at the latest message.
    await page.reload()
    await expect(page.locator("#transcript article.msg.assistant")).to_have_count(5)
    await page.wait_for_function(AT_BOTTOM)
    await expect(page.locator("#transcript article.msg").last).to_be_in_viewport()

    # A question arriving while the person types (asked from the other tab) does not take the
    # focus from the composer, whatever the question's own form would focus; the title says it.
    await composer(page).fill("half a thought")
    await composer(page).focus()
    await other.get_by_role("textbox", name="Message").fill(BOOK)
    await other.get_by_role("textbox", name="Message").press("Enter")
    await expect(page.locator(".elicit-card")).to_be_visible(timeout=15000)
    await expect(page).to_have_title("Your answer is needed · hello · ChatBridge")
    await expect(composer(page)).to_be_focused()
    await expect(composer(page)).to_have_value("half a thought")
    await other.get_by_role("button", name="Cancel").click()
    await expect(page).to_have_title("hello · ChatBridge", timeout=15000)
    await other.close()


async def test_the_composer_keeps_what_was_typed_and_queues_it_on_request(
    browser: Browser, server: str
) -> None:
    page = await open_chat(browser, server)
    box = composer(page)
    await ask_for_flights(page)
    question = page.locator(".elicit-card .elicit-message")
    await expect(question).to_be_focused()  # not typing: the question's heading, not a button
    await expect(page).to_have_title(f"Your answer is needed · {BOOK} · ChatBridge")
    await expect(page.locator("#announcer")).to_have_text(re.compile(r"^A question: "))

    # A message while the question is open: the composer says so and offers two choices.
    await box.fill("And a hotel in LA, please")
    choice = page.get_by_role("group", name=re.compile("A question above is waiting"))
    await expect(choice).to_be_visible()
    await box.press("Enter")  # not sent, not lost
    await page.screenshot(path=ARTIFACTS / "live-question-open.png")
    await assert_accessible(page, "question open, a message typed")
    await expect(box).to_have_value("And a hotel in LA, please")
    await expect(page.locator("#transcript article.msg.user")).to_have_count(1)
    await choice.get_by_role("button", name="Answer first").click()
    await expect(question).to_be_focused()

    # A refusal by the server (BUSY: the page thought nothing ran) keeps the text too.
    await page.evaluate("document.getElementById('chat-status').dataset.running = 'false'")
    await box.focus()
    await box.press("Enter")
    await expect(page.locator("#errors")).not_to_be_empty()
    await expect(box).to_have_value("And a hotel in LA, please")
    await page.evaluate(
        "document.getElementById('chat-status').dataset.running = 'true';"
        "document.getElementById('message-box').dispatchEvent(new Event('input'))"
    )

    # "Send anyway": queued, shown as such, and the composer is cleared by the server's echo.
    await choice.get_by_role("button", name="Send anyway").click()
    queued = page.locator("#queued article.msg.queued")
    await expect(queued).to_contain_text("And a hotel in LA, please")
    await expect(queued).to_contain_text("Queued")
    await page.screenshot(path=ARTIFACTS / "live-queued.png")
    await assert_accessible(page, "a message queued")
    await expect(box).to_have_value("")
    await expect(box).to_be_focused()

    # A draft survives a reload; so does the queued message (it is on record).
    await box.fill("a draft")
    await page.reload()
    await expect(composer(page)).to_have_value("a draft")
    await expect(page.locator("#queued article.msg.queued")).to_have_count(1)
    await expect(page).to_have_title(f"Your answer is needed · {BOOK} · ChatBridge")
    await composer(page).fill("")

    # The booking's turn ends (declined): the queued message starts the next turn.
    await page.get_by_role("button", name="Decline").click()
    user = page.locator("#transcript article.msg.user")
    await expect(user).to_have_count(2, timeout=15000)
    await expect(user.last).to_contain_text("And a hotel in LA, please")
    await expect(page.locator("#queued article")).to_have_count(0)
    await expect(page.locator("#transcript article.msg.assistant").last).to_contain_text(
        HELP_START, timeout=15000
    )
    await expect(page).to_have_title(f"{BOOK} · ChatBridge")
    await expect(composer(page)).to_be_focused()  # the turn ended: back to the composer

    # After Approve the focus goes to the tool's card (then to its question, once it asks).
    await page.evaluate(
        "window.focused = []; document.addEventListener('focusin', "
        "e => window.focused.push(e.target.id || e.target.className))"
    )
    await say(page, "Send feedback", 2)
    approve = page.get_by_role("button", name="Approve send_feedback")
    await expect(approve).to_be_visible(timeout=15000)
    await expect(page.locator("#announcer")).to_have_text("A tool needs your approval.")
    await expect(page).to_have_title(f"Your answer is needed · {BOOK} · ChatBridge")
    await approve.click()
    feedback = page.locator("article.tool-card").last
    await expect(feedback.locator(".elicit-message")).to_be_focused(timeout=15000)
    focused = await page.evaluate("window.focused")
    card = await feedback.get_attribute("id")
    assert card in focused and focused.index(card) < len(focused) - 1, focused


async def test_stop_the_reply_and_the_length_limit(browser: Browser, slow_server: str) -> None:
    page = await open_chat(browser, slow_server)
    box = composer(page)
    await box.fill("hello")
    await box.press("Enter")
    stop_button = page.get_by_role("button", name="Stop")
    await expect(stop_button).to_be_visible(timeout=15000)
    reply = page.locator("#transcript article.msg.assistant")
    await expect(reply).to_contain_text("offline")  # a few words are written
    await stop_button.click()
    await expect(reply).to_contain_text("Stopped")
    await expect(stop_button).to_be_hidden()
    await expect(box).to_be_focused()
    await expect(page.locator("#announcer")).to_have_text("The reply was stopped.")
    await page.screenshot(path=ARTIFACTS / "live-stopped.png")
    await assert_accessible(page, "a reply stopped")
    shown = (await reply.locator(".bubble").inner_text()).strip()
    assert shown.startswith(HELP_START[:10]) and "Ask in your own words" not in shown, shown
    await page.reload()  # what the user saw is the reply on record (the model's history)
    await expect(page.locator("#transcript article.msg.assistant .bubble")).to_have_text(shown)
    await expect(reply).to_contain_text("Stopped")  # still marked

    # Shift+Enter starts a new line (Enter sends), and the composer grows with the text.
    one_line = (await box.bounding_box() or {}).get("height", 0)
    await box.fill("line one")
    await box.press("Shift+Enter")
    await box.press_sequentially("line two")
    await box.press("Shift+Enter")
    await box.press_sequentially("line three")
    await expect(box).to_have_value("line one\nline two\nline three")
    assert (await box.bounding_box() or {}).get("height", 0) > one_line + 20
    await expect(page.locator("#transcript article.msg.user")).to_have_count(1)

    # Near the limit the composer counts down; over it, it refuses instead of cutting.
    await box.fill("x" * 3600)
    await expect(page.locator("#composer-note")).to_have_text("400 characters left")
    await box.fill("x" * 4001)
    note = page.locator("#composer-note")
    await expect(note).to_have_text(
        "Your message is 4,001 characters long; the limit is 4,000. Remove 1 to send it."
    )
    await box.press("Enter")
    await expect(box).to_have_value("x" * 4001)
    await expect(page.locator("#transcript article.msg.user")).to_have_count(1)
    # The server refuses it as clearly (an API client, or a page that does not check).
    refusal = await page.evaluate(
        """() => new Promise((resolve) => {
            const id = document.querySelector("main").dataset.conversation;
            const ws = new WebSocket(`ws://${location.host}/ws/chat/${id}/?format=json`);
            const text = "y".repeat(4001);
            ws.onopen = () => ws.send(JSON.stringify({type: "user_message", text}));
            ws.onmessage = (e) => {
                const m = JSON.parse(e.data);
                if (m.type === "error") { ws.close(); resolve(m); }
            };
        })"""
    )
    assert refusal["code"] == "TOO_LONG", refusal
    assert "4,001 characters long; the limit is 4,000" in refusal["message"]
