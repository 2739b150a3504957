"""The chat's Content-Security-Policy in chromium: a whole booking (with its payment page) and
the colour picker's guest UI run without a single violation, and code injected inline into
the chat page does not run."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, BrowserContext, ConsoleMessage, Page, expect

from tests.servers import superuser
from tests.test_browser import (
    ask_for_flights,
    expect_confirmation,
    first_free,
    new_chat,
    pick_first_flight,
    review_and_pay,
    send,
)
from tests.test_browser_admin_pages import log_in_to_admin
from tests.test_browser_pages import _item, _settled

# Every page and frame reports its violations to the console, where the test collects them
# (Chrome logs its own "Refused to ..." line for each as well).
REPORT_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.cspViolations.push(event.effectiveDirective);
  console.error(`CSP violation: ${event.effectiveDirective} blocked ${event.blockedURI}`
    + ` in ${event.sourceFile}:${event.lineNumber} ${event.sample}`);
});
"""


async def watched(browser: Browser) -> tuple[BrowserContext, list[str]]:
    """A browser context whose pages and frames report every CSP violation into a list."""
    context = await browser.new_context()
    await context.add_init_script(REPORT_VIOLATIONS)
    violations: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if "CSP violation" in message.text or "Content Security Policy" in message.text:
            violations.append(message.text)

    context.on("console", on_console)
    return context, violations


async def open_chat(context: BrowserContext, server: str) -> Page:
    page = await context.new_page()
    response = await page.goto(server + "/")
    assert response is not None
    assert "script-src 'self'" in (await response.all_headers())["content-security-policy"]
    await new_chat(page)
    return page


async def test_a_booking_and_the_colour_picker_raise_no_violation(
    browser: Browser, server: str
) -> None:
    context, violations = await watched(browser)
    page = await open_chat(context, server)
    await ask_for_flights(page)  # the empty state goes with the first message
    await expect(page.locator("#empty-chat")).to_have_count(0)
    seat = first_free(await pick_first_flight(page))
    await page.get_by_role("button", name=seat, exact=True).click()
    await review_and_pay(page)  # the payment page, in a tab of its own
    await expect_confirmation(page, seat)
    assert violations == []

    await send(page, "Choose a colour")
    frame = page.frame_locator("iframe.guest-frame")  # a sandboxed frame of this site
    await frame.get_by_label("Custom colour (hex)").fill("#zzz", timeout=15000)
    await frame.get_by_role("button", name="Choose").click()  # refused on the server, shown
    await expect(frame.get_by_role("alert")).to_contain_text("not accepted", timeout=15000)
    await frame.get_by_label("Custom colour (hex)").fill("#12AB34")
    await frame.get_by_role("button", name="Choose").click()
    result = page.locator(".color-result")
    await expect(result).to_have_text("Chosen colour #12ab34", timeout=15000)
    swatch = result.locator(".color-swatch rect")
    assert await swatch.evaluate("(el) => getComputedStyle(el).fill") == "rgb(18, 171, 52)"

    # The sidebar's forms: Esc leaves the rename form.
    item = await _item(page, "Book a flight from JFK to LAX")
    await item.get_by_role("button", name="Rename", exact=True).click()
    await expect(item.get_by_role("textbox", name="Name of this chat")).to_be_focused()
    await _settled(item)
    await page.keyboard.press("Escape")
    await expect(item.get_by_role("button", name="Rename", exact=True)).to_be_focused()

    assert violations == []
    assert await page.evaluate("window.cspViolations") == []
    await context.close()


async def test_code_injected_inline_does_not_run(browser: Browser, server: str) -> None:
    context, violations = await watched(browser)
    page = await open_chat(context, server)
    await page.evaluate(
        """() => {
          window.ran = [];
          const script = document.createElement("script");
          script.textContent = "window.ran.push('script')";
          document.body.append(script);
          const button = document.createElement("button");
          button.id = "injected";
          button.textContent = "Injected";
          button.setAttribute("onclick", "window.ran.push('handler')");
          document.body.append(button);
        }"""
    )
    await page.locator("#injected").click()
    await page.wait_for_function("window.cspViolations.length >= 2")
    assert sorted(await page.evaluate("window.cspViolations")) == [
        "script-src-attr",
        "script-src-elem",
    ]
    assert await page.evaluate("window.ran") == []
    assert len(violations) >= 2  # and the console says so
    # The page still works: a message goes through the socket.
    await send(page, "hello")
    await expect(page.locator("article.msg.assistant").last).to_be_visible(timeout=15000)
    await context.close()


async def test_the_admin_runs_under_the_same_policy(
    browser: Browser, server: str, server_database: Path
) -> None:
    name, password = superuser(server_database, "csp")
    context, violations = await watched(browser)
    chat = await open_chat(context, server)
    await send(chat, "Choose a colour")  # a live session for the admin to show
    await expect(
        chat.frame_locator("iframe.guest-frame").get_by_label("Custom colour (hex)")
    ).to_be_visible(timeout=15000)

    page = await context.new_page()
    await log_in_to_admin(page, server, (name, password))
    sessions = f"{server}/admin/chatbridge_chat/toolsession/"
    response = await page.goto(sessions)
    assert response is not None
    assert "script-src 'self'" in (await response.all_headers())["content-security-policy"]
    badge = page.locator(".cb-badge", has_text="awaiting_elicit").first
    await expect(badge).to_be_visible()
    assert await badge.evaluate("(el) => getComputedStyle(el).backgroundColor") != (
        "rgba(0, 0, 0, 0)"
    )
    row = page.locator("#result_list tr", has=page.locator(".cb-badge", has_text="awaiting"))
    await row.first.locator("th a").click()  # the session's own page
    await expect(page.locator(".cb-badge", has_text="awaiting_elicit")).to_be_visible()
    await page.goto(sessions + "active/")
    await page.goto(f"{server}/admin/chatbridge_chat/conversation/")
    await page.goto(f"{server}/admin/auth/user/add/")
    await expect(page.get_by_label("Username")).to_be_visible()
    assert violations == []
    await context.close()
