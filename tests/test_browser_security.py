"""Hostile text from users, the model and tools stays text in the browser: no script runs."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from tests.reliability import report
from tests.test_browser import open_chat

HOSTILE = (
    '<script>alert("s")</script> <img src=x onerror=alert("i")> '
    '<a hx-get="/hx-probe" hx-trigger="load">x</a> <a href="javascript:alert(1)">j</a>'
)


async def test_hostile_markup_is_inert(browser: Browser, server: str) -> None:
    page = await open_chat(browser, server)
    dialogs: list[str] = []
    probes: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    page.on(
        "request",
        lambda request: (
            probes.append(request.url)
            if "probe" in request.url or request.url.endswith("/x")
            else None
        ),
    )
    box = page.get_by_role("textbox", name="Message")
    # In the user's text, in the tool's arguments and result, and in the model's summary.
    await box.fill(f"{HOSTILE} Book a flight from <img src=y onerror=alert(2)> to LAX")
    await box.press("Enter")
    await expect(page.get_by_role("button", name="Decline").first).to_be_visible(timeout=15000)
    await page.get_by_role("button", name="Decline").first.click()
    await expect(page.locator("article.msg.assistant").last).to_contain_text(
        "did not go through", timeout=15000
    )
    await expect(page.locator("#transcript")).to_contain_text('<script>alert("s")</script>')
    await page.wait_for_timeout(500)
    links = await page.locator('#transcript a[href^="javascript:"]').count()
    assert dialogs == [] and probes == [] and links == 0
    assert await page.locator("#transcript script").count() == 0
    assert await page.locator("#transcript img").count() == 0
    report("hostile markup", dialogs=len(dialogs), requests=len(probes), live_elements=links)
