"""Watching other workers' heartbeats: a request relayed between two workers ends when either
of them dies (``mcp/session_relay.py``).

Liveness comes from the database (the heartbeat every worker writes), never from the channel
layer, as for the calls' leases. One poll per watched worker serves every request watching it,
and stops when none does.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["POLL_SECONDS", "PeerWatch", "Peers"]

logger = logging.getLogger("chatbridge.mcp")

POLL_SECONDS = 2.0  # how often a watched worker's heartbeat is read


class Peers(Protocol):
    """This worker's name, and whether another one is alive (``DjangoCallStore``)."""

    @property
    def worker(self) -> str: ...

    async def alive(self, worker: str) -> bool: ...


@dataclass
class _Watched:
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: int = 0
    poll: asyncio.Task[None] | None = None


class PeerWatch:
    """Waits for workers to die, one heartbeat poll per worker however many wait on it."""

    def __init__(self, peers: Peers, every: float = POLL_SECONDS) -> None:
        self.peers, self.every = peers, every
        self._watched: dict[str, _Watched] = {}

    async def gone(self, worker: str) -> None:
        """Return once ``worker`` is found dead (never, for this worker)."""
        if worker == self.peers.worker:
            await asyncio.Event().wait()
        watched = self._watched.get(worker)
        if watched is None:
            watched = self._watched[worker] = _Watched()
            watched.poll = asyncio.create_task(self._poll(worker, watched.gone))
        watched.waiters += 1
        try:
            await watched.gone.wait()
        finally:
            watched.waiters -= 1
            if not watched.waiters and self._watched.get(worker) is watched:
                del self._watched[worker]
                if watched.poll is not None:
                    watched.poll.cancel()

    async def _poll(self, worker: str, gone: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                alive = await self.peers.alive(worker)
            except Exception as exc:  # the database is away: nobody is declared dead for it
                logger.warning("the heartbeat of %s could not be read: %r", worker, exc)
                continue
            if not alive:
                gone.set()
                return
