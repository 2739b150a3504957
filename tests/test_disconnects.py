"""Which exceptions from a server's send mean only that the client has gone (and no others)."""

from __future__ import annotations

import pytest
from autobahn.exception import Disconnected
from uvicorn.protocols.utils import ClientDisconnected

from chatbridge.chat.disconnects import client_gone


@pytest.mark.parametrize(
    "exc",
    [
        ClientDisconnected(),  # uvicorn: the connection closed under the send
        RuntimeError(  # uvicorn (websockets): it saw the close, the application not yet
            "Unexpected ASGI message 'websocket.send', after sending 'websocket.close' or "
            "response already completed."
        ),
        RuntimeError(  # uvicorn (websockets-sansio)
            "Unexpected ASGI message 'websocket.send', after sending 'websocket.close'."
        ),
        RuntimeError(  # our close after the client's
            "Unexpected ASGI message 'websocket.close', after sending 'websocket.close' or "
            "response already completed."
        ),
        Disconnected("Attempt to send on a closed protocol"),  # daphne (autobahn)
        ConnectionResetError(),
    ],
)
def test_a_client_that_left_is_recognised(exc: BaseException) -> None:
    assert client_gone(exc)


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("Expected ASGI message 'websocket.send' or 'websocket.close', but got 'x'."),
        RuntimeError("something else broke"),
        ValueError("Socket has not been accepted, so cannot send over it"),
        UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
        TypeError("'NoneType' object is not subscriptable"),
    ],
)
def test_real_errors_are_not_taken_for_a_client_that_left(exc: BaseException) -> None:
    assert not client_gone(exc)
