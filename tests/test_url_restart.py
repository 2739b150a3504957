"""A payment link outlives a restart: SIGTERM parks the call waiting at book_flight's payment
question; the link handed out before works on the restarted server and the call finishes."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from plugins.book_flight.data import seat_map_for
from tests.chat_http import RemoteChat, pay_over_http
from tests.servers import fixed_port, migrated_env, start_daphne, stop


@pytest.mark.slow
@pytest.mark.parametrize("when", ["chat back first", "page first"])
async def test_a_payment_link_from_before_a_restart_finishes_the_call(
    when: str, tmp_path: Path
) -> None:
    database = tmp_path / "db.sqlite3"
    env = migrated_env(database)
    port = fixed_port()  # restarted on the same port (see fixed_port)
    base = f"http://127.0.0.1:{port}"
    first = start_daphne(port, env, log=tmp_path / "first.log")
    second = None
    try:
        async with aiohttp.ClientSession() as http:
            chat = await RemoteChat.open(http, base)
            await chat.connect(base)
            flight_id, seats = await chat.book_to_seat()
            await chat.answer(seats, seat_label=seat_map_for(flight_id).first_free())
            await chat.answer(await chat.next("elicit", key="review"), confirm=True)
            payment = await chat.next("elicit", key="payment")
            link = payment["url"]
            assert link.startswith(f"{base}/elicit/")

            first.send_signal(signal.SIGTERM)  # a deploy: the call is parked, not ended
            first.wait(timeout=15)
            await chat.close()
            log = (tmp_path / "first.log").read_text()
            assert "parked 1 live tool call(s); they resume on restart" in log

            second = start_daphne(port, env, log=tmp_path / "second.log")
            if when == "chat back first":  # the call resumes and asks again: the same link
                await chat.connect(base)
                again = await chat.next("elicit", key="payment")
                assert (again["elicit_id"], again["url"]) == (payment["elicit_id"], link)
                await pay_over_http(http, link)
            else:  # nobody holds the call yet: the answer waits on record
                await pay_over_http(http, link)
                await chat.connect(base)
            done = await chat.next("tool_call", status="completed")
            assert done["call_id"] == payment["call_id"]
            assert done["result"]["booked"] is True and done["result"]["paid"] == {"last4": "4242"}
            assert done["result"]["ticket"] in (await chat.next("assistant_message"))["content"]
            async with http.get(link) as used:
                assert used.status == 410
            await chat.close()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                stop(proc)

    with sqlite3.connect(database) as db:
        status, resumes = db.execute(
            "SELECT status, resumes FROM chatbridge_chat_toolsession WHERE id = ?",
            (payment["call_id"],),
        ).fetchone()
        kinds = [
            kind
            for (kind,) in db.execute(
                "SELECT kind FROM chatbridge_chat_journalrecord WHERE session_id = ? ORDER BY seq",
                (payment["call_id"],),
            )
        ]
    assert (status, resumes) == ("completed", 1)
    assert kinds == ["elicit"] * 4 + ["step", "sample"]  # the ticket issued once
