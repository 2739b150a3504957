"""The colour picker guest UI in the browser: sandbox, CSP, postMessage protocol, validation."""

from __future__ import annotations

import urllib.request

from playwright.async_api import Browser, Page, expect

from tests.test_browser import ARTIFACTS, open_chat


async def open_picker(browser: Browser, server: str) -> Page:
    page = await open_chat(browser, server)
    box = page.get_by_role("textbox", name="Message")
    await box.fill("Choose a colour")
    await box.press("Enter")
    frame = page.frame_locator("iframe.guest-frame")
    await expect(frame.get_by_label("Custom colour (hex)")).to_be_visible(timeout=15000)
    return page


def tool_status(page: Page):  # type: ignore[no-untyped-def]
    return page.locator(".tool-card", has_text="choose_color").locator(".status")


async def test_the_picker_runs_sandboxed_and_the_host_validates(
    browser: Browser, server: str
) -> None:
    page = await open_picker(browser, server)
    iframe = page.locator("iframe.guest-frame")
    assert await iframe.get_attribute("sandbox") == "allow-scripts"
    await expect(page.locator("dialog.guest-dialog")).to_have_attribute("open", "")
    frame = page.frame_locator("iframe.guest-frame")
    await expect(frame.locator("body")).not_to_have_class("dark")  # the context asked for light

    await frame.get_by_label("Custom colour (hex)").fill("#zzz")
    await frame.get_by_role("button", name="Choose").click()
    error = frame.get_by_role("alert")
    await expect(error).to_have_text(
        "color: '#zzz' does not match '^#[0-9a-fA-F]{6}$'", timeout=15000
    )
    await expect(tool_status(page)).to_have_text("Running")  # the tool did not resume
    await expect(frame.get_by_label("Custom colour (hex)")).to_have_value("#zzz")

    await frame.get_by_label("Custom colour (hex)").fill("#12AB34")
    await frame.get_by_label("Name (optional)").fill("Moss")
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=ARTIFACTS / "color-picker.png")
    await frame.get_by_role("button", name="Choose").click()
    await expect(tool_status(page)).to_have_text("Done", timeout=15000)
    await expect(page.locator(".color-result")).to_have_text("Chosen colour #12ab34 (Moss)")
    await expect(page.locator("dialog.guest-dialog")).to_have_count(0)


async def test_presets_decline_and_cancel(browser: Browser, server: str) -> None:
    page = await open_picker(browser, server)
    frame = page.frame_locator("iframe.guest-frame")
    await frame.get_by_role("button", name="Violet #a855f7").click()
    await expect(frame.get_by_label("Custom colour (hex)")).to_have_value("#a855f7")
    await frame.get_by_role("button", name="Decline").click()
    await expect(page.get_by_text("No colour chosen (decline).")).to_be_visible(timeout=15000)
    # The turn ends with the model's reply; a message sent before that is refused as busy.
    reply = page.locator("article.msg.assistant").last
    await expect(reply).to_contain_text("choose color finished", timeout=15000)

    box = page.get_by_role("textbox", name="Message")
    await box.fill("Choose a colour")
    await box.press("Enter")
    await (
        page.frame_locator("iframe.guest-frame")
        .get_by_role("button", name="Cancel")
        .click(timeout=15000)
    )
    await expect(page.get_by_text("No colour chosen (cancel).")).to_be_visible(timeout=15000)


async def test_messages_from_other_windows_are_ignored(browser: Browser, server: str) -> None:
    page = await open_picker(browser, server)
    await page.evaluate(
        """window.postMessage({jsonrpc: "2.0", id: 1, method: "tools/call",
             params: {name: "_ui_answer",
                      arguments: {action: "accept", content: {color: "#000000"}}}}, "*")"""
    )
    await page.wait_for_timeout(1000)
    await expect(tool_status(page)).to_have_text("Running")
    await expect(page.locator(".color-result")).to_have_count(0)


def test_the_guest_page_is_served_with_a_strict_csp(server: str) -> None:
    with urllib.request.urlopen(f"{server}/ui/color-picker/", timeout=10) as response:
        csp = response.headers["Content-Security-Policy"]
        frame = response.headers["X-Frame-Options"]
    assert "default-src 'none'" in csp and "connect-src" not in csp  # nothing but inline code
    assert "frame-ancestors 'self'" in csp and frame == "SAMEORIGIN"


async def test_the_theme_comes_from_the_context(browser: Browser, server: str) -> None:
    page = await open_chat(browser, server)
    box = page.get_by_role("textbox", name="Message")
    await box.fill("Choose a colour, theme: dark")
    await box.press("Enter")
    frame = page.frame_locator("iframe.guest-frame")
    await expect(frame.locator("body")).to_have_class("dark", timeout=15000)
