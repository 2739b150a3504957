"""SIGTERM: a server stops within 5 seconds in every state, and the calls it held finish after a
restart (DESIGN §9: one runtime per process, started and closed by the server)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from plugins.book_flight.data import seat_map_for
from tests.chat_http import RemoteChat
from tests.servers import free_port, migrated_env, start_daphne, start_uvicorn, stop

EXIT_LIMIT = 5.0
Start = Callable[..., subprocess.Popen[bytes]]
SERVERS: dict[str, Start] = {"daphne": start_daphne, "uvicorn": start_uvicorn}


def terminate(proc: subprocess.Popen[bytes]) -> float:
    """Send SIGTERM and return how long the process took to exit (fail after 15 s)."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the server was still running 15 s after SIGTERM")
    return time.monotonic() - started


@asynccontextmanager
async def serving(kind: str, env: dict[str, str], log: Path) -> AsyncIterator[str]:
    port = free_port()
    proc = SERVERS[kind](port, env, log=log)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            stop(proc)


async def open_question(chat: RemoteChat, state: str) -> dict[str, Any]:
    """Bring the conversation to ``state``; return the open question's form."""
    if state == "chat question":
        await chat.send({"type": "user_message", "text": "Book a flight from JFK to LAX"})
        flights = await chat.next("elicit", key="pick_flight")
        await chat.answer(flights, flight_id=flights["context"]["flights"][0]["id"])
        return await chat.next("elicit", key="pick_seat")
    await chat.send({"type": "user_message", "text": "Choose a colour"})
    return await chat.next("elicit", key="color")  # its form opens the guest UI


async def finish(chat: RemoteChat, form: dict[str, Any]) -> dict[str, Any]:
    if form["key"] == "pick_seat":
        label = seat_map_for(form["context"]["seat_map"]["flight_id"]).first_free()
        await chat.answer(form, seat_label=label)
    else:
        await chat.answer(form, color="#12ab34", name="Moss")
    return await chat.next("tool_call", status="completed")


async def sigterm_and_restart(kind: str, state: str, tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    env = migrated_env(database)
    async with aiohttp.ClientSession() as http:
        port = free_port()
        first = SERVERS[kind](port, env, log=tmp_path / "first.log")
        base = f"http://127.0.0.1:{port}"
        try:
            chat = await RemoteChat.open(http, base)
            await chat.connect(base)
            form = await open_question(chat, state) if state != "idle" else None
            took = terminate(first)
        finally:
            if first.poll() is None:
                stop(first)
        assert took <= EXIT_LIMIT, f"{kind} took {took:.1f}s to exit after SIGTERM"
        log = (tmp_path / "first.log").read_text()
        assert "ChatBridge runtime stopped" in log
        if form is None:
            return
        assert "parked 1 live tool call(s); they resume on restart" in log
        with sqlite3.connect(database) as db:
            (status,) = db.execute(
                "SELECT status FROM chatbridge_chat_toolsession WHERE id = ?", (form["call_id"],)
            ).fetchone()
        assert status == "awaiting_elicit"  # parked: suspended on record, not ended

        async with serving(kind, env, tmp_path / "second.log") as again:
            await chat.connect(again)
            shown = await chat.next("elicit", key=form["key"])
            assert shown["elicit_id"] == form["elicit_id"]
            done = await finish(chat, shown)
            assert done["call_id"] == form["call_id"]
            await chat.next("assistant_message")
            if chat.socket is not None:
                await chat.socket.close()


async def test_daphne_exits_promptly_on_sigterm_with_a_question_open_and_the_call_finishes(
    tmp_path: Path,
) -> None:
    await sigterm_and_restart("daphne", "chat question", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "state"),
    [  # daphne with a chat question open is the fast test above
        ("daphne", "idle"),
        ("daphne", "guest UI"),
        ("uvicorn", "idle"),
        ("uvicorn", "chat question"),
        ("uvicorn", "guest UI"),
    ],
)
async def test_sigterm_in_every_state(kind: str, state: str, tmp_path: Path) -> None:
    await sigterm_and_restart(kind, state, tmp_path)
