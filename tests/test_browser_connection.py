"""Connection loss in a real browser: the page says when it is offline, and an answer given
while the server is down is sent when it is back, once.

A daphne of its own (port, database) is killed with SIGKILL while book_flight's seat picker is
open, a seat is clicked while nothing listens, and a new daphne is started on the same port and
database: the chat goes on to the review step without a second click, and exactly one seat
answer is on record: the last one clicked (a second click while offline replaces the first).

With the shared server, the page's socket is routed through Playwright to lose an answer with
its socket (sent again on reconnect, applied) and to cut the socket after an answer is
delivered but before its reply (the copy sent again is taken quietly).

A frame over 64 KiB, on daphne as ``make run`` starts it and on uvicorn as docs/production.md
does: the server closes the socket (1009), the page says why in words and connects again, and
nothing typed is lost.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, WebSocketRoute, expect

from plugins.book_flight.data import seat_map_for
from tests.production import Production
from tests.servers import fixed_port, migrated_env, start_daphne, stop
from tests.test_browser import (
    ARTIFACTS,
    ask_for_flights,
    expect_confirmation,
    first_free,
    new_chat,
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
    port = fixed_port()  # restarted on the same port (see fixed_port)
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


class FlakySocket:
    """Routes the chat page's sockets through Playwright: ``drop_next`` loses the next answer
    with its socket (sent, never delivered); ``cut_after_next`` delivers it, then the socket
    dies before the acknowledgement comes back."""

    def __init__(self) -> None:
        self.mode = ""
        self.connections = 0
        self.answers: list[str] = []
        self.tasks: set[asyncio.Task[None]] = set()

    def __call__(self, page_side: WebSocketRoute) -> None:
        self.connections += 1
        server_side = page_side.connect_to_server()

        def from_page(message: str | bytes) -> None:
            text = message if isinstance(message, str) else message.decode()
            if '"elicit_response"' in text and self.mode:
                mode, self.mode = self.mode, ""
                if mode == "cut_after_next":
                    self.answers.append(text)
                    server_side.send(message)
                self._cut(page_side, server_side)
                return
            if '"elicit_response"' in text:
                self.answers.append(text)
            server_side.send(message)

        page_side.on_message(from_page)
        server_side.on_message(page_side.send)

    def _cut(self, page_side: WebSocketRoute, server_side: WebSocketRoute) -> None:
        async def cut() -> None:  # 1012: service restart; the page reconnects by itself
            await page_side.close(code=1012, reason="cut by the test")
            await server_side.close()

        task = asyncio.get_running_loop().create_task(cut())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


async def test_an_answer_lost_with_its_socket_is_sent_again_and_applied_once(
    browser: Browser, server: str
) -> None:
    page = await browser.new_page()
    flaky = FlakySocket()
    await page.route_web_socket(re.compile(r"/ws/chat/"), flaky)
    await page.goto(server + "/")
    await new_chat(page)
    state = page.locator("#connection-state")
    await expect(state).to_have_text(CONNECTED)
    await ask_for_flights(page)
    flight_id = await pick_first_flight(page)

    before = flaky.connections
    flaky.mode = "drop_next"  # the seat leaves on a socket that dies before delivering it
    seat = first_free(flight_id)
    await page.get_by_role("button", name=seat, exact=True).click()
    # The page reconnects and sends it again: the review comes without a second click.
    await expect(page.get_by_role("button", name="Confirm and pay")).to_be_visible(timeout=15000)
    await expect(state).to_have_text(CONNECTED)
    assert flaky.connections == before + 1

    flaky.mode = "cut_after_next"  # delivered, but the socket dies before the reply
    await review_and_pay(page)  # the copy sent again on reconnect is taken quietly
    await expect_confirmation(page, seat)
    await expect(state).to_have_text(CONNECTED)
    await expect(page.get_by_role("alert")).to_have_count(0)  # no error, even later
    assert flaky.connections == before + 2
    confirms = [a for a in flaky.answers if '"confirm"' in a]
    assert len(confirms) == 2 and confirms[0] == confirms[1]  # the same answer, twice
    await page.close()


TOO_LARGE = (
    "That was too large to send: a message may be at most 64 KiB, and nothing of it was kept. "
    "Shorten it and send it again."
)
# What a page script (a guest UI's answer, a plugin's form) could hand the page's socket.
SEND_ANYWAY = """(size) => {
  const socket = document.querySelector("main.chat")["htmx-internal-data"].webSocket;
  socket.sendImmediately(JSON.stringify({command: "user_message", text: "x".repeat(size)}), null);
}"""


async def too_large_is_told(page: Page) -> None:
    state = page.locator("#connection-state")
    await expect(state).to_have_text(CONNECTED)
    box = page.get_by_role("textbox", name="Message")
    await box.fill("A draft I am still writing")
    await page.evaluate(RECORD_STATES)
    await page.evaluate(SEND_ANYWAY, 70 * 1024)
    await expect(page.locator("#errors [role=alert]")).to_have_text(TOO_LARGE)
    await expect(state).to_have_text(CONNECTED)  # connected again, by itself
    assert RECONNECTING in await page.evaluate("window.connectionStates")
    await expect(box).to_have_value("A draft I am still writing")
    await box.press("Enter")  # and the draft goes, on the new socket
    await expect(page.locator("#transcript")).to_contain_text("A draft I am still writing")
    await expect(box).to_have_value("")


async def test_on_daphne_a_frame_over_64_kib_is_refused_in_words_and_nothing_typed_is_lost(
    browser: Browser, server: str
) -> None:
    page = await open_chat(browser, server)
    await too_large_is_told(page)
    await page.close()


async def test_on_uvicorn_a_frame_over_64_kib_is_refused_in_words_and_nothing_typed_is_lost(
    browser: Browser, production: Production
) -> None:
    page = await open_chat(browser, production.url)
    await too_large_is_told(page)
    await page.close()
