"""The colour picker guest UI in the browser: sandbox, CSP, postMessage protocol, validation."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from playwright.async_api import Browser, Page, expect

from tests.conftest import MCP_REQUEST_TIMEOUT
from tests.servers import free_port, migrated_env, start_daphne, stop
from tests.test_browser import ARTIFACTS, open_chat

REFUSED_TINT = (
    "Your previous answer was not accepted. Tint: Enter a colour as # and six hex digits, "
    "like #1a2b3c. Please try again."
)


async def open_picker(browser: Browser, server: str) -> Page:
    page = await open_chat(browser, server)
    box = page.get_by_role("textbox", name="Message")
    await box.fill("Choose a colour")
    await box.press("Enter")
    frame = page.frame_locator("iframe.guest-frame")
    await expect(frame.get_by_label("Custom colour (hex)")).to_be_visible(timeout=15000)
    return page


def tool_status(page: Page):
    return page.locator(".tool-card:has([data-tool=choose_color])").locator(".status")


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
    # Word for word what an MCP Apps host shows (tests/test_browser_mcp_app.py), DESIGN §9.
    await expect(error).to_have_text(
        "Your previous answer was not accepted. Color: Enter a colour as # and six hex digits, "
        "like #1a2b3c. Please try again.",
        timeout=15000,
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
    await expect(reply).to_contain_text(
        "Choosing the color did not go through (you declined)", timeout=15000
    )

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
    """Answers in either protocol posted by the chat page itself (not the card's iframe) are
    dropped: the picker's own Decline, sent after them, is what ends the call."""
    page = await open_picker(browser, server)
    await page.evaluate(
        """for (const message of [
             {jsonrpc: "2.0", id: 1, method: "tools/call", params: {name: "_ui_answer",
              arguments: {action: "accept", content: {color: "#000000"}}}},
             {jsonrpc: "2.0", method: "ui/submit-elicitation",
              params: {action: "accept", content: {color: "#000000"}}},
             {type: "ui/submit-elicitation",
              params: {action: "accept", content: {color: "#000000"}}},
           ]) { window.postMessage(message, "*"); }"""
    )
    await page.frame_locator("iframe.guest-frame").get_by_role("button", name="Decline").click()
    await expect(page.get_by_text("No colour chosen (decline).")).to_be_visible(timeout=15000)
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


@pytest.fixture(scope="module")
def seed004_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app with pick_tint, whose guest UI speaks only seed 004 (tests/seed004.py)."""
    tmp = tmp_path_factory.mktemp("seed004")
    env = migrated_env(tmp / "db.sqlite3", "tests.seed004_settings")
    env["CHATBRIDGE_MCP_REQUEST_TIMEOUT"] = str(MCP_REQUEST_TIMEOUT)
    port = free_port()
    proc = start_daphne(port, env, log=tmp / "daphne.log")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


async def test_a_seed_004_guest_is_served_refused_corrected_and_declined(
    browser: Browser, seed004_server: str
) -> None:
    """ui-lifecycle-iframe-ready → elicitation-context; ui/submit-elicitation refused on the
    server with the words every transport uses, corrected, then a second call declined."""
    page = await open_chat(browser, seed004_server)
    box = page.get_by_role("textbox", name="Message")
    await box.fill("Pick a tint")
    await box.press("Enter")
    guest = page.frame_locator("iframe.guest-frame")
    await expect(guest.locator("#message")).to_have_text("Which tint?", timeout=15000)
    await expect(guest.get_by_label("Tint")).to_have_value("#445566")  # the ui context

    await guest.get_by_label("Tint").fill("#zz")
    await guest.get_by_role("button", name="Send").click()
    await expect(guest.get_by_role("alert")).to_have_text(REFUSED_TINT, timeout=15000)
    await expect(guest.get_by_label("Tint")).to_have_value("#zz")  # the refused values back
    card = page.locator(".tool-card:has([data-tool=pick_tint])")
    await expect(card.locator(".status")).to_have_text("Running")  # the tool did not resume

    await guest.get_by_label("Tint").fill("#12AB34")
    await guest.get_by_role("button", name="Send").click()
    await expect(card.locator(".status")).to_have_text("Done", timeout=15000)
    await expect(card.locator(".tool-result")).to_contain_text("#12ab34")
    reply = page.locator("article.msg.assistant").last
    await expect(reply).to_contain_text("All done: I picked the tint", timeout=15000)

    await box.fill("Pick a tint")
    await box.press("Enter")
    # This guest's buttons are there before its script listens to them: wait until it has
    # the question (its ready handshake done), as a person would see it before clicking.
    guest = page.frame_locator("iframe.guest-frame")
    await expect(guest.locator("#message")).to_have_text("Which tint?", timeout=15000)
    await guest.get_by_role("button", name="Decline").click()
    second = page.locator(".tool-card:has([data-tool=pick_tint])").last
    # Its outcome: the tool returned after its question was declined.
    await expect(second.locator(".status")).to_have_text("Declined", timeout=15000)
    await expect(second.locator(".tool-result")).to_contain_text("the question was declined")


# A host as seed 004 describes one (tests outside the project drive the picker so): it answers
# ui-lifecycle-iframe-ready with the context, keeps each ui/submit-elicitation, and sends the
# context again with the error of a refused one. It ignores everything else (ui/initialize).
SEED_004_HOST = """<!doctype html><html><head><meta charset="utf-8"><title>Seed 004 host</title>
</head><body><iframe id="guest" sandbox="allow-scripts" title="Guest"
  style="width: 480px; height: 560px"></iframe><script>
window.submissions = [];
window.announced = 0;
window.context = {message: "Please select a color for your theme",
  schema: {type: "object", properties: {color: {type: "string"}}, required: ["color"]},
  context: {defaultColor: "#a855f7", theme: "dark"}};
const frame = document.getElementById("guest");
window.sendContext = (extra) => frame.contentWindow.postMessage({jsonrpc: "2.0",
  method: "ui/notifications/elicitation-context", params: {...window.context, ...extra}}, "*");
window.addEventListener("message", (event) => {
  if (event.source !== frame.contentWindow) { return; }
  const m = event.data || {};
  const method = m.method || m.type;
  if (method === "ui-lifecycle-iframe-ready") {
    window.announced += 1; window.firstAnnounced = window.firstAnnounced || performance.now();
    window.sendContext({});
  }
  else if (method === "ui/submit-elicitation") { window.submissions.push(m.params); }
});
</script></body></html>"""


async def test_the_picker_speaks_seed_004_to_a_seed_004_host(browser: Browser, server: str) -> None:
    with urllib.request.urlopen(f"{server}/ui/color-picker/", timeout=10) as response:
        picker = response.read().decode()
    page = await browser.new_page()
    await page.set_content(SEED_004_HOST)
    await page.evaluate("(html) => { document.getElementById('guest').srcdoc = html; }", picker)
    guest = page.frame_locator("#guest")
    await expect(guest.locator("#message")).to_have_text("Please select a color for your theme")
    # Answered in seed 004, the guest does not announce itself again: its fallback
    # announcement (1 s after loading, for hosts that ignore the first) made this host send the
    # context again, clearing a refusal shown meanwhile (the test failed under load). Checked
    # past twice that horizon (a clock of the page: the sandboxed frame's cannot be faked).
    await page.wait_for_function("performance.now() > window.firstAnnounced + 2000")
    assert await page.evaluate("window.announced") == 1
    await expect(guest.get_by_label("Custom colour (hex)")).to_have_value("#a855f7")
    await expect(guest.locator("body")).to_have_class("dark")

    await guest.get_by_label("Custom colour (hex)").fill("#zzz")
    await guest.get_by_role("button", name="Choose").click()
    await page.wait_for_function("window.submissions.length === 1")
    assert await page.evaluate("window.submissions") == [
        {"action": "accept", "content": {"color": "#zzz"}}
    ]
    await page.evaluate(
        "window.sendContext({error: 'color: not a colour', submitted: {color: '#zzz'}})"
    )
    await expect(guest.get_by_role("alert")).to_have_text("color: not a colour")
    await expect(guest.get_by_label("Custom colour (hex)")).to_have_value("#zzz")

    await guest.get_by_label("Custom colour (hex)").fill("#12AB34")
    await guest.get_by_role("button", name="Choose").click()
    await page.wait_for_function("window.submissions.length === 2")
    await page.evaluate("window.sendContext({})")  # as if refused again: the picker is usable
    await guest.get_by_role("button", name="Decline").click()
    await page.wait_for_function("window.submissions.length === 3")
    assert (await page.evaluate("window.submissions"))[1:] == [
        {"action": "accept", "content": {"color": "#12AB34"}},
        {"action": "decline"},
    ]
