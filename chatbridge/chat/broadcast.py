"""Publishing a conversation's events to its sockets.

Sockets of this process get each event as it is, at once (``attach``/``detach``): no channel
layer, no copy, no encoding and decoding on the way. Sockets of other processes get it
through the channel layer's group of the conversation, marked with this worker, so that the
sockets here, which are in the group too, drop the copy. The in-memory channel layer has no
other processes: nothing is sent through it.

The hub and the session manager belong to the process's ``ChatBridgeRuntime``
(``chatbridge.runtime.current_runtime()``), not to any socket: a dropped WebSocket leaves
running tools and turns alone, and a reconnecting browser finds them again.
"""

from __future__ import annotations

import logging
from typing import Protocol

from channels.layers import InMemoryChannelLayer, get_channel_layer

from chatbridge.chat.recorder import WORKER_ID
from chatbridge.core.protocol import ChatEvent

__all__ = ["LocalSocket", "attach", "conversation_group", "detach", "publish", "sockets_here"]


class LocalSocket(Protocol):
    """A socket of this process showing a conversation."""

    def deliver(self, event: ChatEvent) -> None:
        """Take ``event`` to send, in order, without waiting for the client."""


# The sockets of this process, by conversation. Only the sockets themselves add and remove
# themselves (``attach`` when they join, ``detach`` when they close).
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


logger = logging.getLogger("chatbridge.chat")
_publish_failing = False  # in an outage: log its first failure only


def conversation_group(conversation_id: str) -> str:
    """The channel-layer group of a conversation's sockets."""
    return f"chat.{conversation_id}"


async def publish(conversation_id: str, event: ChatEvent) -> None:
    """Send ``event`` to every socket of the conversation: this process's at once, the
    others' through the channel layer.

    Best effort: a channel-layer error is logged, never raised into a turn or a tool (the
    conversation's record is the database; a socket that missed events reconnects and gets
    the state and open forms again).
    """
    for socket in tuple(_sockets.get(conversation_id, ())):
        socket.deliver(event)
    layer = get_channel_layer()
    assert layer is not None, "CHANNEL_LAYERS is not configured"
    if isinstance(layer, InMemoryChannelLayer):
        return  # one process: every socket is here
    message = {"type": "chat.event", "event": event.model_dump(mode="json"), "origin": WORKER_ID}
    global _publish_failing
    for attempt in (1, 2):  # a pooled connection Redis dropped fails once, then reconnects
        try:
            await layer.group_send(conversation_group(conversation_id), message)
        except Exception as exc:  # Redis down or restarting
            failure = (event.type, conversation_id, attempt, type(exc).__name__, exc)
            # The first failure of an outage is a warning; the rest (every event) is noise.
            log = logger.debug if _publish_failing else logger.warning
            log("event %s of conversation %s not published (attempt %d): %s: %s", *failure)
            if attempt == 2:
                _publish_failing = True
            continue
        if _publish_failing:
            _publish_failing = False
            logger.info("publishing events works again")
        return
