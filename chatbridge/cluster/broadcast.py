"""Publishing a conversation's events to its sockets, here and on the other workers, and
knowing which other workers show it.

Sockets of this process get each event as it is, at once (``attach``/``detach``): no channel
layer, no copy, no encoding and decoding on the way. Each other worker that shows the
conversation gets it once, at its listener (``chatbridge.cluster.listener``), which hands it
to its sockets (``deliver_here``). While no other worker shows it, nothing is sent through the
layer; the in-memory channel layer has no other processes, so nothing ever is.

How a worker knows who shows what (a ``Viewers``, one per runtime: what it was told is kept
there, and only the runtime's listener tells it): a worker says to all (``Showing``) when its
first socket of a conversation opens, and ``Hidden`` when its last one closes
(``Broadcast.announce``), and all it shows when its listener (re)joins the workers' group
(``Broadcast.announce_everything``), asking the others to say theirs back, so a worker started
later, or one that lost messages in an outage, learns the whole picture. The socket is
accepted once every other worker it knows of has said it took the word in (``ShownAck``), so a
turn another worker starts right then does not leave the socket without its first events; a
worker silent for ``ACK_WAIT`` is taken for gone until it speaks again. Every worker says again
what it shows every ``REFRESH_SECONDS``, and a word not said again within ``SHOWN_FOR`` lapses:
a worker killed without a word is not sent to for long (and one whose channel fills up is
forgotten at once).

Events and these words travel on the channel layer ``EVENTS_LAYER`` when the project
configures one (the demo site's settings make it channels_redis's pub/sub layer: one PUBLISH
each, nothing kept in Redis), else on the default layer. A failure of the channel layer
anywhere in the process (``layer_failed``) has the listener join again, say again what this
worker shows and have its sockets shown their conversations again: events sent meanwhile may
be lost, and a restarted Redis has forgotten the groups.

The runtime owns one ``Broadcast`` (``runtime.broadcast``) and the ``Viewers`` it reads; the
sockets themselves are the process's, as its connections are (a runtime started again in the
same process, as tests do, finds them still there). The hub and the session manager belong to
the process's ``ChatBridgeRuntime`` (``chatbridge.runtime.current_runtime()``), not to any
socket: a dropped WebSocket leaves running tools and turns alone, and a reconnecting browser
finds them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import DatabaseError

from chatbridge.cluster.messages import ChatEventCopy, Hidden, Showing, ShownAck
from chatbridge.engine.protocol import ChatEvent
from chatbridge.records.liveness import beat, live_workers
from chatbridge.records.recorder import WORKER_ID

__all__ = [
    "EVENTS_LAYER",
    "REFRESH_SECONDS",
    "SHOWN_FOR",
    "VIEWERS_GROUP",
    "Broadcast",
    "LocalSocket",
    "Viewers",
    "attach",
    "conversations_here",
    "deliver_here",
    "detach",
    "events_layer",
    "sockets_here",
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


# -- this process's sockets, and publishing to every socket of a conversation ---------------


class LocalSocket(Protocol):
    """A socket of this process showing a conversation."""

    def deliver(self, event: ChatEvent) -> None:
        """Take ``event`` to send, in order, without waiting for the client."""

    async def rejoined(self) -> None:
        """The channel layer is back after an outage: show the conversation again."""


# The sockets of this process, by conversation: the process's, as its connections are. Only the
# sockets themselves add and remove themselves (``attach`` when they open, ``detach`` when they
# close).
_sockets: dict[str, set[LocalSocket]] = {}


def attach(conversation_id: str, socket: LocalSocket) -> None:
    _sockets.setdefault(conversation_id, set()).add(socket)


def detach(conversation_id: str, socket: LocalSocket) -> None:
    here = _sockets.get(conversation_id)
    if here is not None:
        here.discard(socket)
        if not here:
            del _sockets[conversation_id]


def sockets_here(conversation_id: str) -> int:
    """How many sockets of this process show the conversation."""
    return len(_sockets.get(conversation_id, ()))


def conversations_here() -> dict[str, list[LocalSocket]]:
    """The conversations this process's sockets show, with those sockets."""
    return {conversation_id: list(sockets) for conversation_id, sockets in _sockets.items()}


def deliver_here(conversation_id: str, event: ChatEvent) -> None:
    """Hand ``event`` to this process's sockets of the conversation."""
    for socket in tuple(_sockets.get(conversation_id, ())):
        socket.deliver(event)


class Broadcast:
    """A runtime's publishing of events and its words of what this worker shows (see the
    module docstring), on what its ``viewers`` were told."""

    def __init__(self, viewers: Viewers) -> None:
        self.viewers = viewers
        self._failing = False  # in an outage: log its first failure only
        # One announcement at a time, each saying what holds as it is sent: a socket closing as
        # another opens cannot leave the others believing the conversation hidden. (Made on
        # the running loop.)
        self._announcing: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    async def publish(self, conversation_id: str, event: ChatEvent) -> None:
        """Send ``event`` to every socket of the conversation: this process's at once, each
        other worker that shows it once, through the channel layer.

        Best effort: a channel-layer error is logged, never raised into a turn or a tool (the
        conversation's record is the database; a socket that missed events is shown the state
        and open forms again when the layer is back, or when it reconnects).
        """
        deliver_here(conversation_id, event)
        channels = self.viewers.channels_showing(conversation_id)
        if not channels:
            return
        layer = events_layer()
        if layer is None:
            return
        copy = ChatEventCopy(conversation_id=conversation_id, event=event.model_dump(mode="json"))
        sent = copy.model_dump(mode="json", exclude={"reply_to"})
        for channel in channels:
            await self._send(layer, channel, sent, (event.type, conversation_id))

    async def _send(
        self, layer: Any, channel: str, message: dict[str, Any], what: tuple[str, str]
    ) -> None:
        for attempt in (1, 2):  # a pooled connection Redis dropped fails once, then reconnects
            try:
                await layer.send(channel, message)
            except ChannelFull:  # its worker does not read: it is gone, or stuck
                self.viewers.forget_channel(what[1], channel)
                return
            except Exception as exc:  # Redis down or restarting
                # The first failure of an outage is a warning; the rest (every event) is noise.
                log = logger.debug if self._failing else logger.warning
                failure = (*what, attempt, type(exc).__name__, exc)
                log("event %s of conversation %s not published (attempt %d): %s: %s", *failure)
                if attempt == 2:
                    self._failing = True
                    self.viewers.layer_failed(exc)
                continue
            if self._failing:
                self._failing = False
                logger.info("publishing events works again")
            return

    def _one_at_a_time(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._announcing is None or self._announcing[0] is not loop:
            self._announcing = (loop, asyncio.Lock())
        return self._announcing[1]

    async def announce(self, conversation_id: str) -> None:
        """Tell the other workers whether this one shows the conversation now (its first
        socket opened, or its last closed); that it shows it, waiting (up to ``ACK_WAIT``)
        until the workers it knows of have taken it in. A failure is left to the listener,
        which says everything again once the layer is back."""
        layer, viewers = events_layer(), self.viewers
        if layer is None:
            return  # one process
        await viewers.until_settled(ACK_WAIT)  # the workers alive know this one: they hear it
        if viewers.listening_on() is None:
            return  # the listener says everything when it (re)joins
        token, taken_in = "", None
        async with self._one_at_a_time():
            channel = viewers.listening_on()
            if channel is None:
                return
            word: Showing | Hidden = Hidden(worker=WORKER_ID, conversation_id=conversation_id)
            if sockets_here(conversation_id):
                others = viewers.peers()
                token = uuid.uuid4().hex if others else ""
                taken_in = viewers.awaiting_acks(token, others) if others else None
                word = Showing(
                    worker=WORKER_ID, channel=channel, conversations=[conversation_id], ack=token
                )
            try:
                await layer.group_send(VIEWERS_GROUP, word.model_dump(mode="json"))
            except Exception as exc:
                viewers.unacknowledged(token)
                viewers.layer_failed(exc)
                return
        if taken_in is not None:
            await self._taken_in(token, taken_in)

    async def _taken_in(self, token: str, taken_in: asyncio.Event) -> None:
        """Wait (up to ``ACK_WAIT``) for the workers asked to acknowledge ``token``."""
        try:
            await asyncio.wait_for(taken_in.wait(), ACK_WAIT)
        except TimeoutError:
            silent = sorted(self.viewers.unacknowledged(token))
            logger.info("workers %s did not answer in %.0f s; taken for gone", silent, ACK_WAIT)
        else:
            self.viewers.unacknowledged(token)

    async def join_round(self) -> None:
        """The listener joined: say every conversation shown here, ask the others to say
        theirs, and wait (up to ``ACK_WAIT``) for the workers alive (by their heartbeats) to
        have answered, so this worker knows what they show before its sockets open and its
        turns send events. Raises if the layer fails (the listener starts again)."""
        if events_layer() is None or self.viewers.listening_on() is None:
            return  # one process
        others = await _alive() - {WORKER_ID}
        token = uuid.uuid4().hex if others else ""
        taken_in = self.viewers.awaiting_acks(token, others) if others else None
        try:
            await self.announce_everything(ask_back=True, ack=token)
        except BaseException:
            self.viewers.unacknowledged(token)
            raise
        if taken_in is not None:
            await self._taken_in(token, taken_in)

    async def announce_everything(
        self, *, ask_back: bool = False, to: str = "", ack: str = ""
    ) -> None:
        """Tell the other workers (or the one listening on ``to``) every conversation this
        one shows; with ``ask_back``, ask them to say theirs (and with ``ack``, to acknowledge
        once they have). Raises if the layer fails (the listener calls it, and starts
        again)."""
        layer, channel = events_layer(), self.viewers.listening_on()
        if layer is None or channel is None:
            return
        async with self._one_at_a_time():
            word = Showing(
                worker=WORKER_ID,
                channel=channel,
                conversations=sorted(_sockets),
                everything=True,
                ask_back=ask_back,
                ack=ack,
            )
            if to:
                await layer.send(to, word.model_dump(mode="json"))
            else:
                await layer.group_send(VIEWERS_GROUP, word.model_dump(mode="json"))


async def _alive() -> set[str]:
    """The workers alive by their heartbeats, this one's written first: a worker that
    joins after this one reads it, and waits for its answer (``Broadcast.join_round``)."""
    try:
        await sync_to_async(beat)()
        return set(await sync_to_async(live_workers)())
    except DatabaseError as exc:  # then only what they say is known
        logger.warning("the workers alive are not known: %s: %s", type(exc).__name__, exc)
        return set()
