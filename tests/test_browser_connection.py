"""Connection loss in a real browser: the page says when it is offline, and an answer given
while the server is down is sent when it is back, once.

A daphne of its own (port, database) is killed with SIGKILL while book_flight's seat picker is
open, a seat is clicked while nothing listens, and a new daphne is started on the same port and
database: the chat goes on to the review step without a second click, and exactly one seat
answer is on record: the last one clicked (a second click while offline replaces the first).
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from plugins.book_flight.data import seat_map_for
from tests.servers import free_port, migrated_env, start_daphne, stop
from tests.test_browser import (
    ARTIFACTS,
    ask_for_flights,
    expect_confirmation,
    first_free,
    open_chat,
    pick_first_flight,
    review_and_pay,
)

CONNECTED = "Connected"
RECONNECTING = "Reconnecting…"
OFFLINE = "Offline — your answers will be sent when the connection is back"

# Every text the connection state showed, in order (a MutationObserver in the page).
RECORD_STATES = """() => {
  const state = document.getElementById("connection-state");
  window.connectionStates = [state.textContent.trim()];
  new MutationObserver(() => window.connectionStates.push(state.textContent.trim()))
    .observe(state, {childList: true, characterData: true, subtree: true});
}"""


def second_free(flight_id: str) -> str:
    free = [
        seat["label"]
        for row in seat_map_for(flight_id).grid()
        for seat in row["seats"]
        if not seat["taken"]
    ]
    return free[1]


@pytest.mark.slow
async def test_a_seat_clicked_while_the_server_is_down_is_sent_once_when_it_is_back(
    browser: Browser, tmp_path: Path
) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    database = tmp_path / "db.sqlite3"
    env = migrated_env(database)
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    first = start_daphne(port, env, log=tmp_path / "first.log")
    second = None
    try:
        page = await open_chat(browser, server)
        state = page.locator("#connection-state")
        await expect(state).to_have_attribute("role", "status")
        await expect(state).to_have_text(CONNECTED)
        await ask_for_flights(page)
        flight_id = await pick_first_flight(page)
        await expect(page.locator("#chat-status")).to_have_text("Waiting for your answer…")
        await page.evaluate(RECORD_STATES)

        first.send_signal(signal.SIGKILL)  # a crash under the open seat picker
        first.wait(timeout=10)
        await expect(state).to_have_text(OFFLINE, timeout=15000)
        states = await page.evaluate("window.connectionStates")
        assert RECONNECTING in states and states.index(RECONNECTING) < states.index(OFFLINE)
        # The page no longer claims that all is well.
        await expect(page.locator("#chat-status")).not_to_have_text("Waiting for your answer…")

        card = page.locator("section.elicit-card")
        mistake = first_free(flight_id)
        await page.get_by_role("button", name=mistake, exact=True).click()
        await expect(card).to_contain_text(
            f"Your answer ({mistake}) will be sent when the connection is back"
        )
        # Another seat of the same question, still offline: it replaces the first one.
        seat = second_free(flight_id)
        await page.get_by_role("button", name=seat, exact=True).click()
        await expect(card).to_contain_text(
            f"Your answer ({seat}) will be sent when the connection is back"
        )
        await expect(card).not_to_contain_text(f"({mistake})")
        await page.screenshot(path=ARTIFACTS / "offline-seat-pending.png", full_page=True)

        second = start_daphne(port, env, log=tmp_path / "second.log")  # same port, same data
        await expect(state).to_have_text(CONNECTED, timeout=20000)
        # No second click: the queued seat reaches the resumed call, and the review follows.
        await expect(page.get_by_role("button", name="Confirm and pay")).to_be_visible(
            timeout=20000
        )
        await expect(page.locator("#transcript")).to_contain_text(seat)
        await expect(page.get_by_role("alert")).to_have_count(0)
        await expect(page.get_by_text("Please wait for the current reply")).to_have_count(0)

        await review_and_pay(page)
        await expect_confirmation(page, seat)
        await expect(page.get_by_role("alert")).to_have_count(0)
        await expect(state).to_have_text(CONNECTED)
        await page.close()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                stop(proc)

    with sqlite3.connect(database) as db:
        [(call_id, status, resumes)] = db.execute(
            "SELECT id, status, resumes FROM chatbridge_chat_toolsession "
            "WHERE tool_name = 'book_flight'"
        ).fetchall()
        answers = db.execute(
            "SELECT key, result FROM chatbridge_chat_journalrecord WHERE session_id = ? "
            "AND kind = 'elicit' ORDER BY seq",
            (call_id,),
        ).fetchall()
    assert (status, resumes) == ("completed", 1)
    seats = [json.loads(result) for key, result in answers if key == "pick_seat"]
    picked = {"row": int(seat[:-1]), "seat": seat[-1]}
    assert seats == [{"action": "accept", "content": picked}], answers  # exactly once
    assert mistake != seat
