"""A URL question's link is a bearer token in its path: the servers' access logs (uvicorn in
production, daphne) and Django's request log never show it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.chat_http import RemoteChat
from tests.servers import free_port, migrated_env, start_daphne, start_uvicorn, stop

Start = Callable[..., Any]


@pytest.mark.parametrize("start", [start_uvicorn, start_daphne], ids=["uvicorn", "daphne"])
async def test_link_tokens_never_reach_the_access_log(tmp_path: Path, start: Start) -> None:
    env = migrated_env(tmp_path / "db.sqlite3")
    port, log = free_port(), tmp_path / "server.log"
    proc = start(port, env, log=log)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            chat = await RemoteChat.open(http, base)
            await chat.connect(base)
            _, seats = await chat.book_to_seat()
            free = next(
                f"{row}{seat}"
                for row in range(1, seats["context"]["seat_map"]["rows"] + 1)
                for seat in seats["context"]["seat_map"]["seats"]
                if f"{row}{seat}" not in seats["context"]["seat_map"]["taken"]
            )
            await chat.answer(seats, seat_label=free)
            review = await chat.next("elicit", key="review")
            await chat.answer(review, confirm=True)
            payment = await chat.next("elicit", key="payment")
            token = payment["url"].rstrip("/").rsplit("/", 1)[-1]
            async with http.get(f"{base}/elicit/{token}/") as page:
                assert page.status == 200
            async with http.get(f"{base}/elicit/{token[::-1]}/") as unknown:
                assert unknown.status == 404  # Django logs "Not Found: <path>" as well
            await chat.close()
    finally:
        stop(proc)
    written = log.read_text(errors="replace")
    assert re.search(r"GET /elicit/\[token\]/", written), written[-2000:]
    assert token not in written and token[::-1] not in written
