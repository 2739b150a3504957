"""A chat client over real HTTP and WebSockets (aiohttp), for tests against daphne processes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp


class RemoteChat:
    """A browser session on a server: its cookie, its conversation, a JSON-protocol socket."""

    def __init__(self, http: aiohttp.ClientSession, cookie: str, conversation_id: str) -> None:
        self.http, self.cookie, self.conversation_id = http, cookie, conversation_id
        self.socket: aiohttp.ClientWebSocketResponse | None = None
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def open(cls, http: aiohttp.ClientSession, base: str) -> RemoteChat:
        async with http.get(f"{base}/", allow_redirects=False) as response:
            cookie = response.cookies["sessionid"].value
            conversation_id = response.headers["Location"].strip("/").split("/")[-1]
        return cls(http, cookie, conversation_id)

    async def connect(self, base: str) -> None:
        if self.socket is not None:
            await self.socket.close()
        ws_base = base.replace("http://", "ws://")
        self.socket = await self.http.ws_connect(
            f"{ws_base}/ws/chat/{self.conversation_id}/?format=json",
            headers={"Origin": base, "Cookie": f"sessionid={self.cookie}"},
        )

    async def send(self, command: dict[str, Any]) -> None:
        assert self.socket is not None
        await self.socket.send_str(json.dumps(command))

    async def next(self, kind: str, timeout: float = 20.0, **match: Any) -> dict[str, Any]:
        assert self.socket is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            assert remaining > 0, f"no {kind} {match}; got {[e['type'] for e in self.events[-12:]]}"
            message = await self.socket.receive(timeout=remaining)
            assert message.type == aiohttp.WSMsgType.TEXT, message
            event = json.loads(message.data)
            self.events.append(event)
            if event["type"] == kind and all(event.get(k) == v for k, v in match.items()):
                return event

    async def answer(self, form: dict[str, Any], **content: Any) -> None:
        await self.send(
            {
                "type": "elicit_response",
                "session_id": form["session_id"],
                "call_id": form["call_id"],
                "elicit_id": form["elicit_id"],
                "action": "accept",
                "content": content,
            }
        )

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close()
