"""A reply streams as Markdown in chromium (issue 30 point 3): formatted while it is written,
no raw markers, hostile text inert, and nothing moves when it ends.

The server's only tool has a Markdown description (tests/markdown_settings.py), which the
offline model's help reply lists, written slowly (a pause between its pieces of three words).
Screenshots mid-stream and at the end, at desktop and phone widths, go to ``test-artifacts/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from tests.servers import daphne_site
from tests.test_browser import ARTIFACTS, new_chat, send

VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}

# Every change of the reply's bubble, as the page shows it: its HTML (the tail's wrapper taken
# away, as the final bubble has none), its height, whether it is still being written, its text,
# and whether anything hostile ever came alive in it.
WATCH = """() => {
  const seen = window.mdSeen = {states: [], final: null, live: []};
  const transcript = document.getElementById("transcript");
  const shown = (bubble) => {
    const copy = bubble.cloneNode(true);
    copy.querySelectorAll(".md-tail").forEach((tail) => tail.replaceWith(...tail.childNodes));
    return copy.innerHTML;
  };
  new MutationObserver(() => {
    const bubble = transcript.querySelector("article.msg.assistant .bubble");
    if (!bubble || seen.final) return;
    const hostile = bubble.querySelector("script, img, iframe, [onerror], [onclick], " +
      "[hx-get], a[href^='javascript'], a[href^='data']");
    if (hostile) seen.live.push(hostile.outerHTML);
    const state = {html: shown(bubble), height: bubble.getBoundingClientRect().height,
                   text: bubble.textContent, streaming: bubble.classList.contains("streaming")};
    if (state.streaming) seen.states.push(state); else seen.final = state;
  }).observe(transcript, {childList: true, subtree: true, characterData: true});
}"""

# The reply being written, once it shows ``selector``: its text and HTML (null before).
MID_STREAM = """(selector) => {
  const bubble = document.querySelector("#transcript .bubble.streaming");
  return bubble && bubble.querySelector(selector)
    ? {text: bubble.textContent, html: bubble.innerHTML} : null;
}"""


@pytest.fixture(scope="module")
def markdown_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with daphne_site(
        tmp_path_factory.mktemp("markdown"),
        DJANGO_SETTINGS_MODULE="tests.markdown_settings",
        CHATBRIDGE_OFFLINE_STREAM_DELAY="0.1",
    ) as base:
        yield base


async def mid_stream(page: Page, selector: str) -> dict[str, str]:
    """The reply being written, waited for until it shows ``selector``."""
    handle = await page.wait_for_function(MID_STREAM, arg=selector, timeout=30000)
    found: dict[str, str] = await handle.json_value()
    return found


@pytest.mark.parametrize("device", VIEWPORTS)
async def test_a_reply_is_formatted_as_it_streams_and_does_not_move_when_it_ends(
    browser: Browser, markdown_server: str, device: str
) -> None:
    page = await browser.new_page(viewport=VIEWPORTS[device])  # type: ignore[arg-type]
    await page.goto(markdown_server + "/")
    await new_chat(page)
    await page.evaluate(WATCH)
    await send(page, "hello")

    # Mid-stream: a list, then an open code fence, already formatted; no raw markers.
    listed = await mid_stream(page, "ol > li strong")
    assert "<strong>travel notes</strong>" in listed["html"] and "<h2>" in listed["html"]
    assert "**" not in listed["text"] and "`" not in listed["text"]
    await page.screenshot(path=ARTIFACTS / f"markdown-stream-list-{device}.png")
    coded = await mid_stream(page, "pre > code")
    assert "def cheapest" in coded["text"] and "```" not in coded["text"]
    await page.screenshot(path=ARTIFACTS / f"markdown-stream-code-{device}.png")

    reply = page.locator("#transcript article.msg.assistant")
    await expect(reply).to_contain_text("Ask in your own words", timeout=30000)
    await expect(reply.locator(".bubble.streaming")).to_have_count(0)
    await page.screenshot(path=ARTIFACTS / f"markdown-stream-end-{device}.png")

    seen: dict[str, Any] = await page.evaluate("window.mdSeen")
    states, final = seen["states"], seen["final"]
    assert len(states) > 20 and final is not None  # it was written in many steps
    assert seen["live"] == []  # the hostile text never came alive, mid-stream or after
    for state in states:  # never a raw marker while it was written
        assert "**" not in state["text"] and "```" not in state["text"], state["text"]
    assert '&lt;script&gt;alert("s")&lt;/script&gt;' in final["html"]  # shown as text
    # The last streamed render is the final one, and as tall: nothing moves when it ends.
    assert final["html"] == states[-1]["html"]
    assert final["height"] == pytest.approx(states[-1]["height"], abs=0.5)
    heights = [state["height"] for state in states]
    assert heights == sorted(heights)  # it only ever grew while it was written

    # The whole reply's code block offers Copy code, in its corner: the bubble did not move.
    copy_code = reply.locator("pre").get_by_role("button", name="Copy code")
    await expect(copy_code).to_have_count(1)
    bubble = reply.locator(".bubble").first
    box = await bubble.bounding_box()
    assert box is not None and box["height"] == pytest.approx(final["height"], abs=0.5)
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    await copy_code.focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("#announcer")).to_have_text("Copied")
    copied = await page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("def cheapest(flights):") and "Copy code" not in copied

    # Scrolled up while the next reply is written, the page stays where the person put it.
    await send(page, "hello")
    await page.wait_for_function(
        """() => document.querySelector("#transcript .bubble.streaming li") &&
                 document.documentElement.scrollHeight > window.innerHeight + 100"""
    )
    await page.mouse.move(200, 300)
    await page.mouse.wheel(0, -10000)
    await page.wait_for_function("() => window.scrollY === 0")
    await expect(reply.nth(1)).to_contain_text("Ask in your own words", timeout=30000)
    await expect(page.get_by_role("button", name="Jump to latest")).to_be_visible()
    assert await page.evaluate("window.scrollY") == 0
    await page.close()


async def test_a_short_scroll_up_while_a_reply_is_written_is_kept(
    browser: Browser, markdown_server: str
) -> None:
    """A person who scrolls up only a little (less than the 40 px that still count as "at the
    latest") while a reply is written is not pulled back down by the next piece of it."""
    page = await browser.new_page(viewport={"width": 1280, "height": 500})
    await page.goto(markdown_server + "/")
    await new_chat(page)
    await send(page, "hello")
    await page.wait_for_function(
        """() => document.querySelector("#transcript .bubble.streaming li") &&
                 document.documentElement.scrollHeight > window.innerHeight + 100"""
    )
    await page.mouse.move(640, 200)
    await page.mouse.wheel(0, -20)
    reply = page.locator("#transcript article.msg.assistant")
    await expect(reply).to_contain_text("Ask in your own words", timeout=30000)
    await expect(reply.locator(".bubble.streaming")).to_have_count(0)
    left = await page.evaluate(
        "document.documentElement.scrollHeight - window.innerHeight - window.scrollY"
    )
    assert left > 10, left  # still where the person put it, not at the foot
    await expect(page.get_by_role("button", name="Jump to latest")).to_be_visible()
    await page.close()
