"""A JSON-protocol chat client over Channels' WebsocketCommunicator, for socket tests."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore

from chatbridge.asgi import application
from chatbridge.records.models import Conversation
from tests.chat_http import TEST_CARD

# A page of the site itself: the Origin is the same host and port as the Host the socket asks.
ORIGIN = (b"origin", b"http://127.0.0.1")
HOST = (b"host", b"127.0.0.1")


@sync_to_async
def new_browser_session() -> str:
    session = SessionStore()
    session.create()
    assert session.session_key is not None
    return session.session_key


@sync_to_async
def new_conversation(session_key: str) -> str:
    return str(Conversation.objects.create(owner=f"session:{session_key}").id)


def from_address(client: tuple[str, int]) -> Any:
    """The application, as a server that accepted a connection from ``client`` (host, port)
    calls it (the communicator's scope has no client)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await application({**scope, "client": client}, receive, send)

    return app


class ChatClient:
    """Speaks the JSON protocol; remembers every event it received. ``client``: the address
    the connection comes from (none, as the communicator has it, unless given), with
    ``headers`` of the handshake such as a balancer's ``X-Forwarded-For``."""

    def __init__(
        self,
        conversation_id: str,
        session_key: str,
        *,
        origin: bool = True,
        client: tuple[str, int] | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        handshake = [(b"cookie", f"sessionid={session_key}".encode()), HOST, *headers]
        if origin:
            handshake.append(ORIGIN)
        self.conversation_id, self.session_key = conversation_id, session_key
        app = application if client is None else from_address(client)
        self.socket = WebsocketCommunicator(
            app, f"/ws/chat/{conversation_id}/?format=json", headers=handshake
        )
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def start(
        cls,
        *,
        client: tuple[str, int] | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> ChatClient:
        """A new browser's socket on its new conversation, connected."""
        key = await new_browser_session()
        chat = cls(await new_conversation(key), key, client=client, headers=headers)
        await chat.connect()
        return chat

    async def connect(self) -> None:
        connected, code = await self.socket.connect(timeout=10)
        assert connected, f"socket refused with code {code}"

    async def close(self) -> None:
        await self.socket.disconnect()

    async def refused(self) -> tuple[dict[str, Any], int]:
        """Connect a socket the server refuses after its handshake: the ``error`` event that
        says why, and the close code that follows it."""
        connected, code = await self.socket.connect(timeout=10)
        assert connected, f"socket refused at its handshake with code {code}"
        error = await self.next("error")
        closing = await self.socket.receive_output(timeout=5)
        assert closing["type"] == "websocket.close", closing
        return error, int(closing["code"])

    async def send(self, command: dict[str, Any]) -> None:
        await self.socket.send_to(text_data=json.dumps(command))

    async def send_user(self, text: str) -> None:
        await self.send({"type": "user_message", "text": text})

    async def next(self, kind: str, timeout: float = 10.0, **match: Any) -> dict[str, Any]:
        """The next event of ``kind`` (whose fields equal ``match``), skipping others."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            assert remaining > 0, (
                f"no {kind} {match} event; got {[e['type'] for e in self.events[-15:]]}"
            )
            event = json.loads(await self.socket.receive_from(timeout=remaining))
            self.events.append(event)
            if event["type"] == kind and all(event.get(k) == v for k, v in match.items()):
                return event

    async def answer(self, form: dict[str, Any], action: str = "accept", **content: Any) -> None:
        await self.send(
            {
                "type": "elicit_response",
                "session_id": form["session_id"],
                "call_id": form["call_id"],
                "elicit_id": form["elicit_id"],
                "action": action,
                "content": content,
            }
        )

    async def review_and_pay(
        self, review: dict[str, Any] | None = None, timeout: float = 10.0
    ) -> dict[str, Any]:
        """book_flight after the seat: confirm the review (``review``, when the test already
        took its event), pay on the page behind the link (in this process, as a browser tab
        would); the payment question's event."""
        if review is None:
            review = await self.next("elicit", timeout, key="review")
        await self.answer(review, confirm=True)
        payment = await self.next("elicit", timeout, key="payment")
        await pay_on_page(payment["url"])
        return payment

    async def turn_done(self, timeout: float = 15.0) -> dict[str, Any]:
        return await self.next("conversation_state", timeout, phase="done")


async def html_socket(*headers: tuple[bytes, bytes]) -> WebsocketCommunicator:
    """A connected browser-mode (HTML fragments) socket on a new browser's new conversation
    (its handshake with ``headers`` too, such as ``Accept-Language``)."""
    key = await new_browser_session()
    conversation = await new_conversation(key)
    socket = WebsocketCommunicator(
        application,
        f"/ws/chat/{conversation}/",
        headers=[ORIGIN, HOST, (b"cookie", f"sessionid={key}".encode()), *headers],
    )
    connected, code = await socket.connect(timeout=10)
    assert connected, f"socket refused with code {code}"
    return socket


async def pay_on_page(url: str) -> None:
    """Fill book_flight's payment page at ``url`` with a test card (in this process)."""
    from django.test import AsyncClient

    path = urlsplit(url).path
    client = AsyncClient()
    assert (await client.get(path)).status_code == 200
    done = await client.post(path, TEST_CARD)
    assert done.status_code == 200, done.content.decode()[:500]
