"""Process-wide runtime objects: the ``SessionManager`` and the ``ChatHub``.

Both are created once per process and owned by it, not by any socket: a dropped WebSocket
leaves running tools and turns alone, and a reconnecting browser finds them again.
"""

from __future__ import annotations

import logging
from functools import cache

from channels.layers import get_channel_layer
from django.conf import settings

from chatbridge.chat.registry import get_registry
from chatbridge.chat.rendering import render_form
from chatbridge.chat.store import DjangoStore
from chatbridge.core import SessionManager
from chatbridge.core.engine import ChatHub
from chatbridge.core.protocol import ChatEvent
from chatbridge.core.sampling import LiteLLMSampler

__all__ = ["conversation_group", "get_hub", "get_session_manager", "publish"]

logger = logging.getLogger("chatbridge.chat")
_publish_failing = False  # in an outage: log its first failure only


def conversation_group(conversation_id: str) -> str:
    return f"chat.{conversation_id}"


@cache
def get_session_manager() -> SessionManager:
    """The one manager of this process, configured from the settings."""
    from chatbridge.chat.recorder import DjangoRecorder

    timeout = settings.CHATBRIDGE_SESSION_IDLE_TIMEOUT
    return SessionManager(
        sampler=LiteLLMSampler(settings.CHATBRIDGE_MODEL),
        idle_timeout=timeout if timeout and timeout > 0 else None,
        observer=DjangoRecorder(),
    )


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


@cache
def get_hub() -> ChatHub:
    """The process's chat engine hub."""
    from chatbridge.chat.workers import ChannelPeers  # workers imports this module

    store = DjangoStore()
    return ChatHub(
        registry=get_registry(),
        manager=get_session_manager(),
        store=store,
        leases=store,
        sink=publish,
        render_form=render_form,
        model=settings.CHATBRIDGE_MODEL,
        peers=ChannelPeers(),
    )
