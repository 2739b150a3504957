"""The admin pages ChatBridge adds or overrides, as an operator meets them (issue 30, point 5):
no serious accessibility violation (axe-core, light and dark), no missing favicon, the live
box says how long the question has waited, and the abort reason is the operator's own words."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.async_api import Browser, Page, Response, expect

from tests.axe import axe_context
from tests.servers import superuser
from tests.test_browser import new_chat, send

SERIOUS = ("serious", "critical")


async def serious_violations(page: Page) -> list[str]:
    """Serious or critical axe violations of ``page`` (Django's own admin markup has moderate
    ones, such as landmarks, that are not this project's to change)."""
    result = await page.evaluate(
        """async () => (await window.axe.run(document, {resultTypes: ["violations"]}))
             .violations.map((v) => ({id: v.id, impact: v.impact,
               nodes: v.nodes.map((n) => n.target.join(" ") + ": " + n.failureSummary)}))"""
    )
    return [
        f"{v['id']} ({v['impact']}): {'; '.join(v['nodes'])}"
        for v in result
        if v["impact"] in SERIOUS
    ]


async def log_in_to_admin(page: Page, server: str, login: tuple[str, str]) -> None:
    """Log in on the admin's login page as the operator ``login`` (name, password)."""
    await page.goto(f"{server}/admin/login/")
    await page.get_by_label("Username").fill(login[0])
    await page.get_by_label("Password").fill(login[1])
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("heading", name="Site administration")).to_be_visible()


async def test_the_admin_pages_of_chatbridge_serve_an_operator_well(
    browser: Browser, server: str, server_database: Path
) -> None:
    name, password = superuser(server_database)
    for scheme in ("light", "dark"):
        await operator_visit(browser, server, (name, password), scheme)


async def operator_visit(
    browser: Browser, server: str, login: tuple[str, str], scheme: str
) -> None:
    """A live session, then the admin's pages of it in ``scheme``, each checked."""
    context = await axe_context(browser, scheme)
    failed: list[str] = []

    def watch(response: Response) -> None:
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    chat = await context.new_page()
    await chat.goto(server + "/")
    await new_chat(chat)
    await send(chat, "Choose a colour")  # a live session, waiting for its question
    await expect(
        chat.frame_locator("iframe.guest-frame").get_by_label("Custom colour (hex)")
    ).to_be_visible(timeout=15000)

    page = await context.new_page()
    page.on("response", watch)
    await log_in_to_admin(page, server, login)

    sessions = f"{server}/admin/chatbridge_chat/toolsession/"
    await page.goto(sessions)
    assert await serious_violations(page) == [], f"{scheme}: session list"
    row = page.locator("#result_list tr", has=page.locator(".cb-badge", has_text="awaiting"))
    await row.first.locator("th a").click()  # the session's own page, as linked
    live = page.locator(".cb-live")
    await expect(live).to_contain_text(re.compile(r"waiting for color for \d+ (second|minute)"))
    assert await serious_violations(page) == [], f"{scheme}: session page"
    await live.get_by_role("link", name="Abort this session…").click()
    await expect(page.get_by_label("Reason:")).to_have_value("")  # the operator's own words
    assert await serious_violations(page) == [], f"{scheme}: abort confirmation"
    await page.goto(sessions + "active/")
    assert await serious_violations(page) == [], f"{scheme}: active sessions"
    await page.goto(f"{server}/admin/chatbridge_chat/conversation/")
    assert await serious_violations(page) == [], f"{scheme}: conversation list"
    assert failed == [], failed
    # The admin's pages name no icon: what a browser then asks for is there (it was a 404).
    icon = await page.request.get(f"{server}/favicon.ico")
    assert icon.ok and icon.headers["content-type"].startswith("image/svg+xml"), icon.status
    await context.close()
