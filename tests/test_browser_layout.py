"""The chat page's layout as a person sees it (issue 30, point 4), measured in chromium: a
phone's page never scrolls sideways however many chats there are, "Jump to latest" never
covers an open question, a focused control is never hidden under the composer (WCAG 2.2
SC 2.4.11), and the sidebar reaches every chat ("Load more chats") and finds one by name.

Boxes are the browser's own (getBoundingClientRect); screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Locator, Page, expect

from plugins.book_flight.data import search_flights
from tests.axe import axe_context, check
from tests.test_browser import ARTIFACTS, ask_for_flights, new_chat

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
DEVICES = pytest.mark.parametrize("device", ["desktop", "phone"])
SCHEMES = pytest.mark.parametrize("scheme", ["light", "dark"])


async def new_context(browser: Browser, device: str, scheme: str = "light") -> BrowserContext:
    """A context carrying axe, the size of a desktop or of a phone (with touch)."""
    if device == "phone":
        return await axe_context(browser, scheme, viewport=PHONE, has_touch=True, is_mobile=True)
    return await axe_context(browser, scheme, viewport=DESKTOP)


def seed_chats(database: Path, owner: str, titles: list[str]) -> list[str]:
    """Chats of ``owner`` with one message each, written straight into the server's database,
    the first the newest; their ids."""
    now = datetime.now(UTC)
    ids = []
    with contextlib.closing(sqlite3.connect(database)) as db, db:
        for n, title in enumerate(titles):
            chat = uuid.uuid4().hex
            when = (now - timedelta(minutes=n + 1)).strftime("%Y-%m-%d %H:%M:%S.%f")
            db.execute(
                "INSERT INTO chatbridge_chat_conversation (id, owner, title, phase, created_at,"
                " updated_at, turn_worker, turn_address, turn_expires)"
                " VALUES (?, ?, ?, 'idle', ?, ?, '', '', NULL)",
                (chat, owner, title, when, when),
            )
            db.execute(
                "INSERT INTO chatbridge_chat_message (id, conversation_id, seq, role, content,"
                " tool_calls, tool_call_id, stopped, abandoned, created_at)"
                " VALUES (?, ?, 1, 'user', ?, NULL, '', 0, 0, ?)",
                (f"{chat}-1", chat, title, when),
            )
            ids.append(str(uuid.UUID(chat)))
    return ids


async def owner(context: BrowserContext, server: str, page: Page) -> str:
    """The owner key of the browser ``context`` (its session, started by visiting the site)."""
    await page.goto(server + "/")
    session = [c["value"] for c in await context.cookies() if c["name"] == "sessionid"]
    assert session, "no session cookie"
    return f"session:{session[0]}"


async def box(locator: Locator) -> dict[str, float]:
    """The element's box in the window, as the browser lays it out."""
    found = await locator.evaluate(
        "e => { const r = e.getBoundingClientRect();"
        " return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; }"
    )
    return dict(found)


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and (b["top"] < a["bottom"])
    )


async def sideways(page: Page) -> int:
    """How far the page scrolls sideways (0 when it does not)."""
    width: int = await page.evaluate(
        "document.scrollingElement.scrollWidth - document.scrollingElement.clientWidth"
    )
    return width


async def chat_at_flights(
    browser: Browser, server: str, device: str
) -> tuple[BrowserContext, Page]:
    """A new chat on ``device`` whose booking asks for the flight."""
    context = await new_context(browser, device)
    page = await context.new_page()
    await page.goto(server + "/")
    await new_chat(page)
    await ask_for_flights(page)
    return context, page


async def decline_at_composer(page: Page, fraction: float, px: float) -> None:
    """Scroll so that the point ``fraction`` of Decline's height (and ``px`` more) down from its
    top is at the composer's top edge: the rest of it under the composer."""
    await page.evaluate(
        """([fraction, px]) => {
          const d = [...document.querySelectorAll("button")].find(b => b.textContent === "Decline");
          const c = document.querySelector("form.composer");
          const r = d.getBoundingClientRect();
          window.scrollBy(0, r.top + r.height * fraction + px - c.getBoundingClientRect().top);
        }""",
        [fraction, px],
    )


async def queue_from_another_tab(context: BrowserContext, page: Page) -> None:
    """Something new arrives below on ``page``: a message sent from another tab of the same
    chat while its question is open ("Send anyway"), shown queued."""
    other = await context.new_page()
    await other.goto(page.url)
    box_other = other.get_by_role("textbox", name="Message")
    await box_other.fill("And a hotel in LA, please")
    await box_other.press("Enter")
    await other.get_by_role("button", name="Send anyway").click()
    await expect(page.locator("#queued article.msg.queued")).to_have_count(1, timeout=15000)


def snap(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / f"layout-{name}.png"


# ---- 1. Ten chats on a phone ---------------------------------------------------------------


@SCHEMES
async def test_ten_chats_on_a_phone_never_scroll_the_page_sideways(
    browser: Browser, server: str, server_database: Path, scheme: str
) -> None:
    context = await new_context(browser, "phone", scheme)
    page = await context.new_page()
    titles = [f"Weekend trip to Lisbon number {n}" for n in range(1, 11)]
    ids = seed_chats(server_database, await owner(context, server, page), titles)
    await page.goto(f"{server}/c/{ids[0]}/")
    nav = page.get_by_role("navigation", name="Conversations")
    await expect(nav.get_by_role("link")).to_have_count(10)
    assert await sideways(page) <= 0, "the page scrolls sideways"

    # Readable: two chats whole on the screen, a phrase of each name, and the next one peeks
    # in (more to scroll to). Before, one and a half.
    for n in range(2):
        chip = await box(nav.get_by_role("link", name=titles[n], exact=True))
        assert chip["left"] >= 0 and chip["right"] <= PHONE["width"], (titles[n], chip)
        assert chip["right"] - chip["left"] >= 110, (titles[n], chip)
    peek = await box(nav.get_by_role("link", name=titles[2], exact=True))
    assert peek["left"] <= PHONE["width"] - 24, peek
    # One chat's Rename and Delete at a time: the open chat's, reached by keyboard and touch.
    rename = nav.get_by_role("button", name="Rename", exact=True)
    delete = nav.get_by_role("button", name="Delete", exact=True)
    await expect(rename).to_have_count(1)
    await expect(delete).to_have_count(1)
    current = page.locator(f"#conv-item-{ids[0]}")
    await expect(current.get_by_role("button", name="Rename", exact=True)).to_be_visible()
    for button in (rename, delete):
        size = await box(button)  # a finger's target (WCAG 2.5.8: at least 24 by 24)
        assert size["right"] - size["left"] >= 24 and size["bottom"] - size["top"] >= 24, size
    await nav.get_by_role("link", name=titles[0], exact=True).focus()
    await page.keyboard.press("Tab")
    await expect(rename).to_be_focused()
    await page.keyboard.press("Tab")
    await expect(delete).to_be_focused()
    await check(page, "ten chats on a phone")
    await page.screenshot(path=snap(f"phone-ten-chats-{scheme}"))

    # The last chat is reached by scrolling the chips, never the page.
    last = nav.get_by_role("link", name=titles[-1], exact=True)
    await last.scroll_into_view_if_needed()
    await expect(last).to_be_in_viewport(ratio=1)
    assert await sideways(page) <= 0
    assert await page.evaluate("window.scrollX") == 0

    await rename.tap()
    name = current.get_by_role("textbox", name="Name of this chat")
    await expect(name).to_be_focused()
    await expect(name).to_be_in_viewport(ratio=1)
    assert await sideways(page) <= 0, "the rename form scrolls the page sideways"
    await page.screenshot(path=snap(f"phone-rename-{scheme}"))
    await page.keyboard.press("Escape")
    await expect(rename).to_be_focused()

    # Another chat's actions are a tap away: on its own page.
    await nav.get_by_role("link", name=titles[1], exact=True).tap()
    await expect(page).to_have_url(re.compile(ids[1]))
    await expect(
        page.locator(f"#conv-item-{ids[1]}").get_by_role("button", name="Delete", exact=True)
    ).to_be_visible()
    await expect(nav.get_by_role("button", name="Delete", exact=True)).to_have_count(1)
    await context.close()


# ---- 2. "Jump to latest" and the open question ----------------------------------------------


async def controls_clear_of_the_pill(page: Page, form: Locator, pill: Locator) -> int:
    """Checks every control of ``form`` shown whole above the composer against the pill's box;
    how many were shown."""
    pill_box = await box(pill)
    composer_top = (await box(page.locator("form.composer")))["top"]
    shown = 0
    for control in await form.locator("button, input:not([type=hidden]), select").all():
        where = await box(control)
        if where["top"] < 0 or where["bottom"] > composer_top or where["bottom"] <= where["top"]:
            continue
        shown += 1
        assert not overlap(where, pill_box), f"the pill {pill_box} covers a control at {where}"
    return shown


@DEVICES
async def test_jump_to_latest_never_covers_the_open_question(
    browser: Browser, server: str, device: str
) -> None:
    context, page = await chat_at_flights(browser, server, device)
    form = page.locator(".elicit-card form.elicit-form")
    pill = page.get_by_role("button", name="Jump to latest")
    composer = page.locator("form.composer")

    # Scrolled so that the question's foot is just above the composer, the person reads it ...
    async def foot_above_composer() -> None:
        await page.evaluate(
            """() => {
              const form = document.querySelector(".elicit-card form.elicit-form");
              const composer = document.querySelector("form.composer");
              window.scrollBy(0, form.getBoundingClientRect().bottom
                - composer.getBoundingClientRect().top + 2);
            }"""
        )

    await page.mouse.wheel(0, -300)  # a person scrolling up: the page stops following
    await foot_above_composer()
    # ... when something new arrives below (a message sent from another tab, queued).
    await queue_from_another_tab(context, page)
    await expect(pill).to_be_visible()
    await foot_above_composer()
    await expect(pill).to_be_visible()

    pill_box, composer_box = await box(pill), await box(composer)
    # The pill is part of the composer: it covers nothing the composer does not.
    assert composer_box["top"] <= pill_box["top"] and pill_box["bottom"] <= composer_box["bottom"]
    assert not overlap(await box(form), pill_box), "the pill covers the open question"
    assert await controls_clear_of_the_pill(page, form, pill) > 0
    await page.screenshot(path=snap(f"jump-with-question-{device}"))

    # And wherever the person scrolls in the question, no control they see is under the pill.
    start = await page.evaluate(
        "document.querySelector('.elicit-card').getBoundingClientRect().top + window.scrollY"
        " - window.innerHeight"
    )
    end = await page.evaluate("window.scrollY")
    seen = 0
    for y in range(max(0, int(start)), int(end), 80):
        await page.evaluate(f"window.scrollTo(0, {y})")
        if await pill.is_visible():
            seen += await controls_clear_of_the_pill(page, form, pill)
    assert seen > 0
    await check(page, f"Jump to latest with a question open ({device})")
    await context.close()


@DEVICES
async def test_jump_to_latest_coming_and_going_moves_nothing(
    browser: Browser, server: str, device: str
) -> None:
    """The pill shows and hides inside the composer's own box: the composer keeps its height,
    so a control a person is about to press does not move under the pointer as the page
    reaches its foot (the pill then hides) and the page cannot get shorter under it."""
    context, page = await chat_at_flights(browser, server, device)
    pill = page.get_by_role("button", name="Jump to latest")
    composer = page.locator("form.composer")
    decline = page.locator(".elicit-card").get_by_role("button", name="Decline")
    quiet = await box(composer)
    page_height = await page.evaluate("document.documentElement.scrollHeight")

    await page.mouse.wheel(0, -300)  # a person scrolling up: the page stops following
    await page.wait_for_function(
        "() => window.scrollY < document.documentElement.scrollHeight - window.innerHeight - 200"
    )
    await queue_from_another_tab(context, page)  # something new arrives below
    await expect(pill).to_be_visible()
    shown = await box(composer)
    assert shown["bottom"] - shown["top"] == pytest.approx(quiet["bottom"] - quiet["top"])
    grown = await page.evaluate("document.documentElement.scrollHeight")
    queued = await box(page.locator("#queued article.msg.queued"))

    # The person scrolls down to the foot of the page: the pill hides; nothing moves.
    at_foot = await decline.evaluate(
        "e => { window.scrollTo(0, document.documentElement.scrollHeight);"
        " const r = e.getBoundingClientRect();"
        " return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; }"
    )
    await expect(pill).to_be_hidden()
    assert await box(decline) == at_foot, "Decline moved as the pill hid"
    assert await page.evaluate("document.documentElement.scrollHeight") == grown
    hidden = await box(composer)
    assert hidden["bottom"] - hidden["top"] == pytest.approx(quiet["bottom"] - quiet["top"])
    assert grown == pytest.approx(page_height + queued["bottom"] - queued["top"], abs=40)
    await context.close()


# ---- 3. Focus above the composer --------------------------------------------------------------


async def focused_in_sight(page: Page) -> dict[str, Any]:
    """The focused element's box and the composer's top; fails when the composer hides any of
    the focused element (or it is out of the window)."""
    seen: dict[str, Any] = await page.evaluate(
        """() => {
          const e = document.activeElement, c = document.querySelector("form.composer");
          const r = e.getBoundingClientRect(), top = c.getBoundingClientRect().top;
          return {name: (e.innerText || e.getAttribute("aria-label") || e.tagName).trim(),
                  top: r.top, bottom: r.bottom, composer: top, inside: c.contains(e)};
        }"""
    )
    if not seen["inside"]:
        assert seen["top"] >= 0 and seen["bottom"] <= seen["composer"], (
            f"{seen['name']!r} is hidden: its box ends at {seen['bottom']:.0f}px, "
            f"the composer starts at {seen['composer']:.0f}px"
        )
    return seen


@DEVICES
async def test_a_focused_control_is_never_under_the_composer(
    browser: Browser, server: str, device: str
) -> None:
    context, page = await chat_at_flights(browser, server, device)
    flight = search_flights("JFK", "LAX")[0]
    select = page.get_by_role("button", name=f"Select {flight.airline} {flight.number}")
    decline = page.get_by_role("button", name="Decline")
    abort = page.get_by_role("button", name="Abort")
    await expect(page.locator(".elicit-message", has_text="Select your flight")).to_be_focused()
    await page.evaluate("window.scrollTo(0, 0)")  # the person starts from the top

    # Tab through the question and its tool card: each control in sight as it takes the focus.
    reached = []
    for target in (select, decline, abort):
        for _ in range(6):
            await page.keyboard.press("Tab")
            await focused_in_sight(page)
            if await target.evaluate("e => e === document.activeElement"):
                break
        await expect(target).to_be_focused()
        reached.append(await focused_in_sight(page))
    await page.screenshot(path=snap(f"focus-abort-{device}"))

    # Abort asks first; its "Keep going" and "Yes, abort" are in sight when they take the focus.
    await page.keyboard.press("Enter")
    keep = page.get_by_role("button", name="Keep going")
    await expect(keep).to_be_focused()
    await focused_in_sight(page)
    await page.keyboard.press("Shift+Tab")
    await expect(page.get_by_role("button", name="Yes, abort")).to_be_focused()
    await focused_in_sight(page)
    await page.screenshot(path=snap(f"focus-abort-confirm-{device}"))

    # A control focused while in the window but under the composer is lifted above it.
    await page.keyboard.press("Escape")
    await expect(abort).to_be_focused()
    await decline_at_composer(page, 0, 4)  # just under the composer's top
    await decline.focus()
    await focused_in_sight(page)
    await context.close()


async def test_a_click_on_a_control_half_under_the_composer_is_not_lost(
    browser: Browser, server: str
) -> None:
    """Lifting a focused control above the composer never moves it under a pressing pointer:
    a press that focused it and then saw it move would lose its click (Decline, here)."""
    context, page = await chat_at_flights(browser, server, "desktop")
    decline = page.get_by_role("button", name="Decline")
    # Decline's lower half under the composer, its upper half in sight.
    await decline_at_composer(page, 0.6, 0)
    shown = await box(decline)
    cover = await box(page.locator("form.composer"))
    assert shown["top"] < cover["top"] < shown["bottom"], (shown, cover)
    # Pressed just above the composer's edge: the lowest point of it in sight.
    await page.mouse.click((shown["left"] + shown["right"]) / 2, cover["top"] - 2)
    await expect(page.get_by_text("Not booked: flight selection declined")).to_be_visible(
        timeout=15000
    )
    await context.close()


# ---- 4. Every chat reachable, and found by name ---------------------------------------------


@SCHEMES
@DEVICES
async def test_sixty_chats_load_more_and_search(
    browser: Browser, server: str, server_database: Path, device: str, scheme: str
) -> None:
    context = await new_context(browser, device, scheme)
    page = await context.new_page()
    titles = [f"Chat {n:02d} about {'Lisbon' if n % 20 == 7 else 'Rome'}" for n in range(60)]
    ids = seed_chats(server_database, await owner(context, server, page), titles)
    theirs = seed_chats(server_database, f"session:{uuid.uuid4().hex}", ["Lisbon, not yours"])
    await page.goto(f"{server}/c/{ids[0]}/")
    nav = page.get_by_role("navigation", name="Conversations")
    links = nav.get_by_role("link")
    await expect(links).to_have_count(50)
    more = nav.get_by_role("button", name="Load more chats")
    await expect(more).to_be_visible()
    assert await sideways(page) <= 0
    await check(page, f"sidebar with Load more ({device})")

    # Load more, by keyboard: the rest, after the first fifty; the focus on the first new one.
    await more.focus()
    await page.keyboard.press("Enter")
    await expect(links).to_have_count(60)
    await expect(more).to_have_count(0)
    await expect(nav.get_by_role("link", name=titles[50], exact=True)).to_be_focused()
    shown = [await a.inner_text() for a in await links.all()]
    assert shown == titles, "every chat, once, newest first"
    assert await sideways(page) <= 0

    # Search: by a word of the name, whatever its case; another's chat is never found.
    search = page.get_by_role("searchbox", name="Search chats")
    await search.click()
    await search.press_sequentially("lisbon")
    found = [t for t in titles if "Lisbon" in t]
    await expect(links).to_have_count(len(found))
    assert [await a.inner_text() for a in await links.all()] == found
    status = page.get_by_role("status").filter(has_text="chats found")
    await expect(status).to_have_text(f"{len(found)} chats found.")
    await expect(page.locator(f"#conv-item-{theirs[0]}")).to_have_count(0)
    await expect(search).to_be_focused()  # typing goes on
    assert await sideways(page) <= 0
    await check(page, f"search results ({device})")
    await page.screenshot(path=snap(f"search-{device}-{scheme}"))
    await search.fill("Paris")
    await expect(page.get_by_role("status").filter(has_text="Paris")).to_have_text(
        "No chat has “Paris” in its name."
    )
    await expect(links).to_have_count(0)
    await check(page, f"search that finds nothing ({device})")
    await search.fill("")
    await expect(links).to_have_count(50)
    await expect(more).to_be_visible()

    # Without JavaScript the search is a page of its own (as is each further page of chats).
    await page.goto(f"{server}/c/{ids[0]}/chats/?q=LISBON")
    await expect(page.get_by_role("heading", name="Chats found", level=1)).to_be_visible()
    await expect(nav.get_by_role("link")).to_have_count(len(found))
    await expect(page.get_by_role("searchbox", name="Search chats")).to_have_value("LISBON")
    assert await sideways(page) <= 0
    await check(page, f"search as a page ({device})")
    await page.screenshot(path=snap(f"search-page-{device}-{scheme}"))
    await context.close()
