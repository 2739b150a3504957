"""Words for people in the browser (issue 15): errors next to their field with focus on the
first, badges that tell what happened, the three exits of a question explained, Abort that asks
first, and the assistant's plain reply after the user's own Abort."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from tests.test_browser import ARTIFACTS, ask_for_flights, open_chat, send


async def test_errors_badges_exits_and_abort_in_words(browser: Browser, server: str) -> None:
    page = await open_chat(browser, server)

    # A form refused by the server: each error in words, next to its field; focus on the first.
    await send(page, "Send feedback")
    await page.get_by_role("button", name="Approve send_feedback").click(timeout=15000)
    await expect(page.get_by_label("Your name")).to_be_visible(timeout=15000)
    await page.evaluate("document.querySelectorAll('form').forEach(f => f.noValidate = true)")
    await page.get_by_label("Your name").fill("Ada")
    await page.get_by_role("textbox", name="Email").fill("ada.example.org")
    await page.get_by_label("Date of your visit").fill("2026-11-20")
    await page.get_by_label("Rating").fill("3")
    await page.get_by_label("Topic").select_option("idea")
    await page.locator(".auto-form-submit").click()
    email_error = page.get_by_role("alert").filter(has_text="Email:")
    await expect(email_error).to_have_text(
        "Email: Enter an email address like name@example.com", timeout=15000
    )
    # focus on the refused field, which names its error (aria-describedby)
    await expect(page.get_by_role("textbox", name="Email")).to_be_focused()
    field = page.locator(".form-field", has=page.get_by_role("textbox", name="Email"))
    await expect(field.get_by_role("alert")).to_have_count(1)  # beside its own field
    await expect(page.locator(".elicit-card")).not_to_contain_text("pattern")
    ARTIFACTS.mkdir(exist_ok=True)
    await email_error.screenshot(path=ARTIFACTS / "words-field-error.png")

    # The exits are explained; declining gives a "Declined" badge, never a green "Done".
    card = page.locator(".elicit-card")
    # What Decline and Cancel do, said without hedging: the tool is told, and decides.
    await expect(card).to_contain_text("Say no to this question: the tool is told you declined")
    await expect(card).to_contain_text("Close this question without answering: the tool is told")
    await page.get_by_role("button", name="Decline").click()
    feedback = page.locator(".tool-card:has([data-tool=send_feedback])")
    await expect(feedback.locator(".status")).to_have_text("Declined", timeout=15000)
    await expect(feedback).to_contain_text("Declined: this question was skipped")
    await feedback.screenshot(path=ARTIFACTS / "words-declined.png")
    await expect(page.locator("#chat-status")).to_have_text("", timeout=15000)

    # Abort asks first: focus on "Keep going", Esc backs out, then "Yes, abort" stops it.
    await ask_for_flights(page)
    booking = page.locator(".tool-card:has([data-tool=book_flight])").last
    abort = booking.get_by_role("button", name="Abort")
    await expect(booking).to_contain_text("Ends the whole tool call, not only a question.")
    await abort.click()
    keep = booking.get_by_role("button", name="Keep going")
    await expect(keep).to_be_focused()
    await expect(booking.get_by_role("group")).to_contain_text("Abort book flight now?")
    await page.screenshot(path=ARTIFACTS / "abort-confirmation.png")
    await page.keyboard.press("Escape")
    await expect(keep).to_be_hidden()
    await expect(abort).to_be_focused()
    await expect(booking.locator(".status")).to_have_text("Running")
    await abort.click()
    await booking.get_by_role("button", name="Yes, abort").click()
    await expect(booking.locator(".status")).to_have_text("Stopped by you", timeout=15000)
    await expect(booking.locator(".tool-result")).to_have_text(
        "You stopped this before it finished."
    )
    reply = page.locator("article.msg.assistant .bubble").last
    await expect(reply).to_have_text(
        "OK, I stopped booking the flight as you asked. Tell me if you want to start again.",
        timeout=15000,
    )
    await expect(page.locator("#transcript")).not_to_contain_text("Sorry")
    await booking.screenshot(path=ARTIFACTS / "words-stopped-by-you.png")
    await page.close()
