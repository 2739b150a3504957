"""A suspended booking survives a crash: SIGKILL the server, start another, answer, done."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from plugins.book_flight.data import seat_map_for
from tests.chat_http import RemoteChat
from tests.servers import free_port, migrated_env, start_daphne, stop


@pytest.mark.slow
@pytest.mark.timeout(180)  # two server starts: ~40 s with both cores busy, 60+ in the suite
async def test_a_booking_survives_sigkill_and_finishes_on_a_new_process(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    env = migrated_env(database)
    first_port, second_port = free_port(), free_port()
    first = start_daphne(first_port, env)
    second = None
    try:
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{first_port}"
            chat = await RemoteChat.open(http, base)
            await chat.connect(base)
            flight_id, seats = await chat.book_to_seat()

            first.send_signal(signal.SIGKILL)  # a crash: nothing gets to clean up
            first.wait(timeout=10)
            await chat.close()

            second = start_daphne(second_port, env)
            base = f"http://127.0.0.1:{second_port}"
            await chat.connect(base)
            again = await chat.next("elicit", key="pick_seat")  # the question is back
            assert again["elicit_id"] == seats["elicit_id"]
            label = seat_map_for(flight_id).first_free()
            assert label is not None
            await chat.answer(again, seat_label=label)
            # The link names the first server when the second's takeover resumed the call
            # before the socket was back (a site's two processes share one public address).
            await chat.review_and_pay(base=base)
            done = await chat.next("tool_call", status="completed")
            assert done["result"]["booked"] is True and done["result"]["seat"] == label
            await chat.next("assistant_message")
            await chat.close()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                stop(proc)

    with sqlite3.connect(database) as db:
        status, worker, resumes = db.execute(
            "SELECT status, worker, resumes FROM chatbridge_chat_toolsession WHERE id = ?",
            (seats["session_id"],),
        ).fetchone()
        journal = db.execute(
            "SELECT kind, result FROM chatbridge_chat_journalrecord WHERE session_id = ? "
            "ORDER BY seq",
            (seats["session_id"],),
        ).fetchall()
    assert (status, resumes) == ("completed", 1)
    assert second is not None and worker.endswith(f":{second.pid}")
    assert [kind for kind, _ in journal] == ["elicit"] * 4 + ["step", "sample"]
    [ticket] = [result for kind, result in journal if kind == "step"]  # issued once
    assert done["result"]["ticket"] in ticket


@pytest.mark.slow
async def test_an_answer_resent_right_after_a_restart_is_delivered_not_busy(
    tmp_path: Path,
) -> None:
    env = migrated_env(tmp_path / "db.sqlite3")
    first_port, second_port = free_port(), free_port()
    first = start_daphne(first_port, env)
    second = None
    try:
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{first_port}"
            chat = await RemoteChat.open(http, base)
            await chat.connect(base)
            flight_id, seats = await chat.book_to_seat()
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
            await chat.close()

            second = start_daphne(second_port, env)
            base = f"http://127.0.0.1:{second_port}"
            # Two tabs: one reconnects (and resumes the call), the other re-sends its answer
            # at the same moment, before the question is shown again.
            tab = RemoteChat(http, chat.cookie, chat.conversation_id)
            await asyncio.gather(chat.connect(base), tab.connect(base))
            label = seat_map_for(flight_id).first_free()
            assert label is not None
            await asyncio.gather(
                chat.answer(seats, seat_label=label), tab.answer(seats, seat_label=label)
            )
            await chat.review_and_pay(base=base)  # as above: any of the site's servers
            done = await chat.next("tool_call", status="completed")
            assert done["result"]["seat"] == label
            await chat.next("assistant_message")
            errors = [e["code"] for c in (chat, tab) for e in c.events if e["type"] == "error"]
            # One answer is taken; the same answer again is taken quietly, never applied twice.
            assert errors == [], errors
            for client in (chat, tab):
                await client.close()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                stop(proc)
