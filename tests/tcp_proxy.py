"""A TCP forwarder the test owns, to cut a shared service off from the servers under test
(PostgreSQL, which serves every engineer's tests, is never stopped itself).

The forwarder listens on a port of its own and runs on a thread with its own event loop, so
that it keeps forwarding while the test's loop is blocked (a server starting, a synchronous
query). ``cut`` closes every connection it carries, abruptly (a reset, as when a network link
or the database's host goes away), and refuses new ones; ``restore`` lets them through again.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from tests.servers import fixed_port

__all__ = ["TcpProxy", "tcp_proxy"]

T = TypeVar("T")
CHUNK = 65536


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target``; ``cut`` and ``restore`` the link."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = fixed_port()  # listened on again after a cut, the same port
        # While nothing listens (before the start, during a cut) the port stays bound: a
        # connection to it is refused, and no other test's server can be given it meanwhile.
        self._held: socket.socket | None = _bound(self.port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._ends: set[asyncio.StreamWriter] = set()  # both ends of every carried connection
        self._carrying: set[asyncio.Task[Any]] = set()  # a task per connection

    def start(self) -> None:
        self._thread.start()
        self._call(self._listen())

    def cut(self) -> None:
        """Reset every connection carried, and refuse new ones until ``restore``."""
        self._call(self._cut())

    def restore(self) -> None:
        """Accept and forward connections again."""
        self._call(self._listen())

    def close(self) -> None:
        self._call(self._close())
        if self._held is not None:
            self._held.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        assert self._held is not None, "already listening"
        sock, self._held = self._held, None
        self._server = await asyncio.start_server(self._forward, sock=sock)

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()  # connections are refused from now on
            await self._server.wait_closed()
            self._server = None
            self._held = _bound(self.port)
        for end in list(self._ends):
            _reset(end)
        self._ends.clear()

    async def _close(self) -> None:
        await self._cut()
        await asyncio.wait_for(asyncio.gather(*self._carrying, return_exceptions=True), 10)

    async def _forward(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._carrying.add(task)
        task.add_done_callback(self._carrying.discard)
        try:
            upstream, to_upstream = await asyncio.open_connection(*self.target)
        except OSError:
            to_client.transport.abort()
            return
        if self._server is None:  # cut while this one was connecting
            to_client.transport.abort()
            to_upstream.transport.abort()
            return
        ends = {to_client, to_upstream}
        self._ends.update(ends)
        try:
            await asyncio.gather(_pipe(client, to_upstream), _pipe(upstream, to_client))
        finally:
            self._ends.difference_update(ends)
            for end in ends:
                end.transport.abort()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
    with contextlib.suppress(OSError):
        if sink.can_write_eof():
            sink.write_eof()


def _bound(port: int) -> socket.socket:
    """A socket bound to ``port`` on loopback, not listening (yet)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the cut's TIME_WAITs
    sock.bind(("127.0.0.1", port))
    return sock


def _reset(end: asyncio.StreamWriter) -> None:
    """Close with a reset (RST), not an orderly FIN: the peer's next read or write fails."""
    with contextlib.suppress(OSError):
        end.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
        )
    end.transport.abort()


@contextlib.contextmanager
def tcp_proxy(target_host: str, target_port: int) -> Iterator[TcpProxy]:
    """A started ``TcpProxy`` to ``target``, closed afterwards."""
    proxy = TcpProxy(target_host, target_port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
