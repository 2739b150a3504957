"""A payment link outlives a restart: SIGTERM parks the call waiting at book_flight's payment
question; the link handed out before works on the restarted server and the call finishes."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from plugins.book_flight.data import seat_map_for
from tests.chat_http import RemoteChat, pay_over_http
from tests.servers import fixed_port, migrated_env, start_daphne, stop
from tests.test_mcp_sessions import wait_until


def tool_message_on_record(database: Path, call_id: str) -> bool:
    with sqlite3.connect(database) as db:
        query = "SELECT 1 FROM chatbridge_chat_message WHERE role = 'tool' AND tool_call_id = ?"
        return db.execute(query, (call_id,)).fetchone() is not None


def asked_again(database: Path, call_id: str, key: str) -> bool:
    """The call resumed on the restarted server and its replay reached ``key`` again: the
    question is pending since the resume (its form and link are made)."""
    with sqlite3.connect(database) as db:
        query = (
            "SELECT 1 FROM chatbridge_chat_toolsession WHERE id = ? AND resumes = 1"
            " AND status = 'awaiting_elicit' AND pending_key = ?"
            " AND pending_since >= last_resumed_at"
        )
        return db.execute(query, (call_id, key)).fetchone() is not None


async def turn_ended_with(chat: RemoteChat, database: Path, call_id: str) -> None:
    """Wait for the chat's turn to end with ``call_id`` ended in it: the socket's first state
    may come before the turn resuming the call started (the socket resumes it if the server
    has not yet), so a turn seen idle before the call's end is waited past."""
    while True:
        await chat.next("conversation_state", running=False)
        if tool_message_on_record(database, call_id):
            return


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
            if when == "chat back first":  # the call resumes and asks again: the same link,
                # absolute though no socket of the chat had reached the new server when the
                # new server resumed the call as it started
                assert wait_until(lambda: asked_again(database, payment["call_id"], "payment"))
                await chat.connect(base)
                again = await chat.next("elicit", key="payment")
                assert (again["elicit_id"], again["url"]) == (payment["elicit_id"], link)
                await pay_over_http(http, link)
                done = await chat.next("tool_call", status="completed")
                assert done["call_id"] == payment["call_id"]
                assert done["result"]["paid"] == {"last4": "4242"}
            else:  # paid before the chat is back: the answer waits on record, or reaches the
                # call that the new server resumed as it started; the call may end before the
                # chat comes back, so the turn's end is what is waited for, not its events
                await pay_over_http(http, link)
                await chat.connect(base)
                await turn_ended_with(chat, database, payment["call_id"])
            # What the person sees when they come back: the ticket in their chat
            async with http.get(
                f"{base}/c/{chat.conversation_id}/", headers={"Cookie": f"sessionid={chat.cookie}"}
            ) as page:
                assert page.status == 200
                html = await page.text()
            async with http.get(link) as used:
                assert used.status == 410
            await chat.close()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                stop(proc)

    with sqlite3.connect(database) as db:
        status, resumes, outcome = db.execute(
            "SELECT status, resumes, result FROM chatbridge_chat_toolsession WHERE id = ?",
            (payment["call_id"],),
        ).fetchone()
        result = json.loads(outcome)
        kinds = [
            kind
            for (kind,) in db.execute(
                "SELECT kind FROM chatbridge_chat_journalrecord WHERE session_id = ? ORDER BY seq",
                (payment["call_id"],),
            )
        ]
    assert (status, resumes) == ("completed", 1)
    assert result["booked"] is True and result["paid"] == {"last4": "4242"}
    assert result["ticket"] in html
    assert kinds == ["elicit"] * 4 + ["step", "sample"]  # the ticket issued once
