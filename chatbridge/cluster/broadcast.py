"""Publishing a conversation's events to its sockets, here and on the other workers.

Sockets of this process get each event as it is, at once (``attach``/``detach``): no channel
layer, no copy, no encoding and decoding on the way. Each other worker that shows the
conversation (``chatbridge.cluster.viewers``) gets it once, at its listener, which hands it to its
sockets (``deliver_here``). While no other worker shows it, nothing is sent through the layer;
the in-memory channel layer has no other processes, so nothing ever is.

Whether this worker shows a conversation is said to the others when that changes
(``Broadcast.announce``) and in full when its listener (re)joins
(``Broadcast.announce_everything``). The runtime owns one ``Broadcast`` (``runtime.broadcast``)
and the ``Viewers`` it reads; the sockets themselves are the process's, as its connections are
(a runtime started again in the same process, as tests do, finds them still there).

The hub and the session manager belong to the process's ``ChatBridgeRuntime``
(``chatbridge.runtime.current_runtime()``), not to any socket: a dropped WebSocket leaves
running tools and turns alone, and a reconnecting browser finds them again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from channels.exceptions import ChannelFull
from django.db import DatabaseError

from chatbridge.cluster.messages import ChatEventCopy, Hidden, Showing
from chatbridge.cluster.viewers import ACK_WAIT, VIEWERS_GROUP, Viewers, events_layer
from chatbridge.engine.protocol import ChatEvent
from chatbridge.records.liveness import beat, live_workers
from chatbridge.records.recorder import WORKER_ID

__all__ = [
    "Broadcast",
    "LocalSocket",
    "attach",
    "conversations_here",
    "deliver_here",
    "detach",
    "sockets_here",
]

logger = logging.getLogger("chatbridge.chat")


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
