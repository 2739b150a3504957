"""The chat's view of the process runtime: its hub and sessions, and publishing events.

The hub and the session manager belong to the process's ``ChatBridgeRuntime``
(``chatbridge.runtime``), not to any socket: a dropped WebSocket leaves running tools and turns
alone, and a reconnecting browser finds them again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from channels.layers import get_channel_layer

from chatbridge.core.protocol import ChatEvent

if TYPE_CHECKING:
    from chatbridge.core.engine import ChatHub
    from chatbridge.core.sessions import SessionManager

__all__ = ["conversation_group", "get_hub", "get_session_manager", "publish"]

logger = logging.getLogger("chatbridge.chat")
_publish_failing = False  # in an outage: log its first failure only


def conversation_group(conversation_id: str) -> str:
    return f"chat.{conversation_id}"


def get_session_manager() -> SessionManager:
    """The running runtime's session manager (``RuntimeNotRunning`` if there is none)."""
    from chatbridge.runtime import current_runtime  # the runtime builds this module's users

    return current_runtime().manager


def get_hub() -> ChatHub:
    """The running runtime's chat hub (``RuntimeNotRunning`` if there is none)."""
    from chatbridge.runtime import current_runtime

    return current_runtime().hub


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
