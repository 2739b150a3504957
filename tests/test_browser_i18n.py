"""The chat in French for a browser that asks for it (issue 29, point 6): the page, the
socket's fragments, a form's refusal and the scripts' own words, all in the browser's language;
nothing of the English interface left on the way."""

from __future__ import annotations

import re

from playwright.async_api import Browser, expect

from tests.test_browser import ARTIFACTS, send

NBSP = "\u00a0"


async def test_a_french_browser_gets_the_chat_in_french(browser: Browser, server: str) -> None:
    page = await browser.new_page(locale="fr-FR")  # Accept-Language: fr-FR
    await page.goto(server + "/")
    await page.get_by_role("button", name="Nouvelle discussion").click()
    await expect(page.locator("html")).to_have_attribute("lang", "fr")
    await expect(page).to_have_title("Nouvelle discussion · ChatBridge")
    await expect(
        page.get_by_role("heading", name=f"Que puis-je faire pour vous{NBSP}?")
    ).to_be_visible()
    # The scripts' words come from the JavaScript catalog.
    await expect(page.locator("#connection-state")).to_have_text("Connecté", timeout=15000)

    # The socket's fragments: an approval, a form, its refusal and the exits, in French.
    await send(page, "Send feedback")
    await page.get_by_role("button", name="Autoriser send_feedback").click(timeout=15000)
    card = page.locator(".elicit-card")
    await expect(card.get_by_role("button", name="Refuser")).to_be_visible(timeout=15000)
    await expect(page.locator("#chat-status")).to_have_text("En attente de votre réponse…")
    await page.evaluate("document.querySelectorAll('form').forEach(f => f.noValidate = true)")
    email = page.get_by_role("textbox", name=re.compile("^E-?mail", re.IGNORECASE))
    await email.fill("ada.example.org")
    await page.locator(".auto-form-submit").click()
    refusal = card.get_by_role("alert").filter(has_text="nom@exemple.com")
    await expect(refusal).to_contain_text(
        "Saisissez une adresse e-mail comme nom@exemple.com", timeout=15000
    )
    await expect(card).to_contain_text("Dire non à cette question")
    ARTIFACTS.mkdir(exist_ok=True)
    await card.screenshot(path=ARTIFACTS / "french-refusal.png")

    await card.get_by_role("button", name="Refuser").click()
    feedback = page.locator(".tool-card:has([data-tool=send_feedback])")
    await expect(feedback.locator(".status")).to_have_text("Refusé", timeout=15000)
    await expect(feedback).to_contain_text(f"Refusé{NBSP}: cette question a été passée")
    await expect(page.locator("#chat-status")).to_have_text("", timeout=15000)
    # Nothing of the interface's English on the page (the messages, the chat's title and the
    # tools' names aside: a tool's name is its author's, like its questions).
    chrome = await page.locator("body").evaluate(
        "b => { const c = b.cloneNode(true);"
        " c.querySelectorAll('article.msg, #chat-title, .conversation-list a, .tool-name')"
        ".forEach(m => m.remove()); return c.innerText; }"
    )
    for english in ("New chat", "Send", "Decline", "Declined", "Connected", "Waiting for"):
        assert not re.search(rf"\b{english}\b", chrome), f"{english!r} left in English: {chrome}"
    await page.screenshot(path=ARTIFACTS / "french-chat.png")
    await page.close()
