"""Which other workers show a conversation: where its events go beyond this process.

A worker's sockets get the events of their own process straight away
(``chatbridge.cluster.broadcast``). An event of a conversation that other workers show too crosses
the channel layer once for each of them, to that worker's listener
(``chatbridge.cluster.listener``), which hands it to its sockets. While no other worker
shows a conversation, nothing of it is sent through the layer at all.

How a worker knows who shows what (a ``Viewers``, one per runtime: what it was told is kept
there, and only the runtime's listener tells it): a worker says to all (``Showing``) when its
first socket of a conversation opens, and ``Hidden`` when its last one closes. The socket is
accepted once every other worker it knows of has said it took the word in (``ShownAck``), so a
turn another worker starts right then does not leave the socket without its first events; a
worker silent for ``ACK_WAIT`` is taken for gone until it speaks again; a listener that
(re)joins the workers' group says all it shows and asks the others to say theirs back, so a
worker started later, or one that lost messages in an outage, learns the whole picture. Every
worker says again what it shows every ``REFRESH_SECONDS``, and a word not said again within
``SHOWN_FOR`` lapses: a worker killed without a word is not sent to for long (and one whose
channel fills up is forgotten at once).

Events and these words travel on the channel layer ``EVENTS_LAYER`` when the project
configures one (the demo site's settings make it channels_redis's pub/sub layer: one PUBLISH
each, nothing kept in Redis), else on the default layer.

A failure of the channel layer anywhere in the process (``layer_failed``) has the listener join
again, say again what this worker shows and have its sockets shown their conversations again:
events sent meanwhile may be lost, and a restarted Redis has forgotten the groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings

from chatbridge.cluster.messages import Hidden, Showing, ShownAck
from chatbridge.records.recorder import WORKER_ID

__all__ = [
    "EVENTS_LAYER",
    "REFRESH_SECONDS",
    "SHOWN_FOR",
    "VIEWERS_GROUP",
    "Viewers",
    "events_layer",
]

logger = logging.getLogger("chatbridge.chat")

REFRESH_SECONDS = 10.0  # how often a worker says again what it shows
SHOWN_FOR = 3 * REFRESH_SECONDS  # how long a worker's word that it shows a conversation holds
EVENTS_LAYER = "chatbridge-events"  # the alias in CHANNEL_LAYERS of the layer events cross
VIEWERS_GROUP = "chatbridge.viewers"  # every worker's listener, on that layer
ACK_WAIT = 2.0  # seconds a socket waits for the other workers to take in that it opened


def events_layer() -> Any:
    """The channel layer events and words of what is shown cross (``EVENTS_LAYER`` if
    configured, else the default one); None when it is the in-memory layer: one process."""
    alias = EVENTS_LAYER if EVENTS_LAYER in getattr(settings, "CHANNEL_LAYERS", {}) else "default"
    layer = get_channel_layer(alias)
    assert layer is not None, "CHANNEL_LAYERS is not configured"
    return None if isinstance(layer, InMemoryChannelLayer) else layer


@dataclass
class _Where:
    channel: str  # the showing worker's listener
    until: float  # time.monotonic() after which the word lapses


class Viewers:
    """What this worker was told of the others: which conversations each shows and where its
    listener hears (changed by the listener only), who was heard from lately, which words wait
    for acknowledgements, and where this worker's own listener listens. One per runtime
    (``ChatBridgeRuntime.viewers``), handed to its listener and its broadcast."""

    def __init__(self) -> None:
        # conversation -> worker -> where to send its events. Changed by ``heard`` only.
        self._elsewhere: dict[str, dict[str, _Where]] = {}
        # worker -> until when it counts as alive: the other workers heard from lately.
        self._peers: dict[str, float] = {}
        # ack token -> (the workers yet to take the word in, set when all have).
        self._awaited: dict[str, tuple[set[str], asyncio.Event]] = {}
        # This worker's listener's channel while it listens, and what to call when the layer
        # fails.
        self._here: str | None = None
        self._on_failure: Callable[[BaseException], None] | None = None
        # Set once the listener joined and heard the workers alive (``settled``); sockets
        # wait for it. Made on first use, on the running loop.
        self._settled: asyncio.Event | None = None

    def listening(
        self, channel: str | None, on_failure: Callable[[BaseException], None] | None
    ) -> None:
        """The listener says where it listens (None: not now, as between an outage's
        retries) and how to tell it of a failure. What the others said is kept meanwhile."""
        self._here, self._on_failure = channel, on_failure

    def stopped(self) -> None:
        """The listener stopped for good: it hears nothing now, and what it knew goes stale."""
        self.listening(None, None)
        self._elsewhere.clear()
        self._peers.clear()
        self._settled = None

    def _settled_flag(self) -> asyncio.Event:
        if self._settled is None:
            self._settled = asyncio.Event()
        return self._settled

    def unsettled(self) -> None:
        """The listener is (re)joining: what the others show is not known yet."""
        self._settled_flag().clear()

    def settled(self) -> None:
        """The listener joined and the workers alive heard of it answered (or were waited
        for): a socket opening now is announced to all that matter."""
        self._settled_flag().set()

    async def until_settled(self, timeout: float) -> None:
        """Wait (up to ``timeout``) until the listener has joined and heard the others."""
        flag = self._settled_flag()
        if not flag.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(flag.wait(), timeout)

    def listening_on(self) -> str | None:
        """This worker's listener's channel on the events layer, where other workers send its
        conversations' events; None while it is not listening."""
        return self._here

    def heard(self, message: Showing | Hidden) -> None:
        """Another worker said what it shows (its own words, sent to all, are ignored)."""
        if message.worker == WORKER_ID:
            return
        self._peers[message.worker] = time.monotonic() + SHOWN_FOR
        if isinstance(message, Hidden):
            self._drop(message.conversation_id, message.worker)
            return
        if message.everything:
            shown = [c for c, by in self._elsewhere.items() if message.worker in by]
            for conversation_id in shown:
                self._drop(conversation_id, message.worker)
        until = time.monotonic() + SHOWN_FOR
        for conversation_id in message.conversations:
            where = _Where(message.channel, until)
            self._elsewhere.setdefault(conversation_id, {})[message.worker] = where

    def peers(self) -> set[str]:
        """The other workers heard from lately (words that lapsed are dropped)."""
        now = time.monotonic()
        for worker in [w for w, until in self._peers.items() if until < now]:
            del self._peers[worker]
        return set(self._peers)

    def awaiting_acks(self, token: str, workers: set[str]) -> asyncio.Event:
        """Wait for ``workers`` to acknowledge the word sent with ``token``: set when all
        have."""
        done = asyncio.Event()
        self._awaited[token] = (set(workers), done)
        if not workers:
            done.set()
        return done

    def acknowledged(self, message: ShownAck) -> None:
        """A worker took in a word of this one (the listener hands it here)."""
        awaited = self._awaited.get(message.token)
        if awaited is not None:
            awaited[0].discard(message.worker)
            if not awaited[0]:
                awaited[1].set()

    def unacknowledged(self, token: str) -> set[str]:
        """Stop waiting for ``token``: the workers that never answered are taken for gone
        (until they speak again)."""
        silent, _ = self._awaited.pop(token, (set(), None))
        for worker in silent:
            self._peers.pop(worker, None)
        return silent

    def channels_showing(self, conversation_id: str) -> list[str]:
        """The listeners of the other workers that show the conversation (words that lapsed
        are dropped as they are found)."""
        shown = self._elsewhere.get(conversation_id)
        if not shown:
            return []
        now = time.monotonic()
        for worker in [w for w, where in shown.items() if where.until < now]:
            self._drop(conversation_id, worker)
        return [where.channel for where in shown.values()]

    def forget_channel(self, conversation_id: str, channel: str) -> None:
        """Stop sending the conversation's events to ``channel`` (its worker does not read
        them: its channel is full) until its worker says again that it shows it."""
        shown = self._elsewhere.get(conversation_id, {})
        for worker in [w for w, where in shown.items() if where.channel == channel]:
            logger.warning(
                "worker %s does not read the events of conversation %s; not sent there any more",
                worker,
                conversation_id,
            )
            self._drop(conversation_id, worker)

    def _drop(self, conversation_id: str, worker: str) -> None:
        shown = self._elsewhere.get(conversation_id)
        if shown is not None:
            shown.pop(worker, None)
            if not shown:
                del self._elsewhere[conversation_id]

    def layer_failed(self, exc: BaseException) -> None:
        """The channel layer failed in this process: the listener joins again and has what
        this worker shows said and shown again (see the module docstring)."""
        if self._on_failure is not None:
            self._on_failure(exc)
