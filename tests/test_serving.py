"""``chatbridge.serving.get_asgi_application``, what a project's asgi.py holds: a project's
own WebSocket routes are served next to the chat's, behind the same origin check."""

from __future__ import annotations

import pytest
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.testing import WebsocketCommunicator
from django.urls import path

from chatbridge.serving import get_asgi_application


class Echo(AsyncWebsocketConsumer):
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        await self.send(text_data=f"echo: {text_data}")


def socket(origin: str) -> WebsocketCommunicator:
    application = get_asgi_application(websocket_urlpatterns=[path("ws/echo/", Echo.as_asgi())])
    headers = [(b"host", b"127.0.0.1:8000"), (b"origin", origin.encode())]
    return WebsocketCommunicator(application, "/ws/echo/", headers)


@pytest.mark.usefixtures("fresh_runtime")
@pytest.mark.django_db(transaction=True)
async def test_a_project_s_own_socket_is_served_next_to_the_chat_s() -> None:
    own = socket("http://127.0.0.1:8000")
    connected, _ = await own.connect(timeout=10)
    assert connected
    await own.send_to(text_data="hello")
    assert await own.receive_from(timeout=10) == "echo: hello"
    await own.disconnect()

    foreign = socket("https://evil.example")
    connected, _ = await foreign.connect(timeout=10)
    assert connected is False  # refused before accept, like the chat's socket
