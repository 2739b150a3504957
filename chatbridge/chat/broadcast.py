"""Publishing a conversation's events to its sockets, through the channel layer's groups.

The hub and the session manager belong to the process's ``ChatBridgeRuntime``
(``chatbridge.runtime.current_runtime()``), not to any socket: a dropped WebSocket leaves
running tools and turns alone, and a reconnecting browser finds them again.
"""

from __future__ import annotations

import logging

from channels.layers import get_channel_layer

from chatbridge.core.protocol import ChatEvent

__all__ = ["conversation_group", "publish"]

logger = logging.getLogger("chatbridge.chat")
_publish_failing = False  # in an outage: log its first failure only


def conversation_group(conversation_id: str) -> str:
    """The channel-layer group of a conversation's sockets."""
    return f"chat.{conversation_id}"


async def publish(conversation_id: str, event: ChatEvent) -> None:
    """Send ``event`` to every socket of the conversation, through the channel layer.

    Best effort: a channel-layer error is logged, never raised into a turn or a tool (the
    conversation's record is the database; a socket that missed events reconnects and gets
    the state and open forms again).
    """
    layer = get_channel_layer()
    assert layer is not None, "CHANNEL_LAYERS is not configured"
    message = {"type": "chat.event", "event": event.model_dump(mode="json")}
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
