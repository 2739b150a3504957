"""What the ASGI servers raise when the application sends to a WebSocket whose client is gone.

The consumer learns that its client left only when the server's ``websocket.disconnect``
reaches it; events sent in between fail. Found by dropping clients in the middle of a turn
(``tests/test_socket_servers.py``):

- uvicorn raises ``ClientDisconnected``, an ``OSError`` as the ASGI spec asks of servers, when
  the connection closes under a send, and ``RuntimeError("Unexpected ASGI message
  'websocket.send', after sending 'websocket.close' ...")`` once it has seen the close (the
  client's, or the application's own) but has not yet told the application;
- daphne (autobahn) raises ``autobahn.exception.Disconnected`` ("Attempt to send on a closed
  protocol") from the closing handshake until the ``websocket.disconnect`` it sends later.

Anything else is a real error and is not recognised here.
"""

from __future__ import annotations

from autobahn.exception import Disconnected

__all__ = ["client_gone"]

_AFTER_CLOSE = "after sending 'websocket.close'"


def client_gone(exc: BaseException) -> bool:
    """True if ``exc``, raised by the server on a send, only means the socket is closed."""
    if isinstance(exc, OSError | Disconnected):
        return True
    text = str(exc)
    return (
        isinstance(exc, RuntimeError)
        and text.startswith("Unexpected ASGI message 'websocket.")
        and _AFTER_CLOSE in text
    )
