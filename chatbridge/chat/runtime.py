"""Process-wide runtime objects: the ``SessionManager`` and the ``ChatHub``.

Both are created once per process and owned by it, not by any socket: a dropped WebSocket
leaves running tools and turns alone, and a reconnecting browser finds them again.
"""

from __future__ import annotations

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


def conversation_group(conversation_id: str) -> str:
    return f"chat.{conversation_id}"


@cache
def get_session_manager() -> SessionManager:
    """The one manager of this process, configured from the settings."""
    from chatbridge.chat.recorder import DjangoRecorder

    timeout = settings.CHATBRIDGE_SESSION_IDLE_TIMEOUT
    recorder = DjangoRecorder()
    return SessionManager(
        sampler=LiteLLMSampler(settings.CHATBRIDGE_MODEL),
        idle_timeout=timeout if timeout and timeout > 0 else None,
        observer=recorder,
        journal_store=recorder,
    )


async def publish(conversation_id: str, event: ChatEvent) -> None:
    """Send ``event`` to every socket of the conversation, through the channel layer."""
    layer = get_channel_layer()
    assert layer is not None, "CHANNEL_LAYERS is not configured"
    await layer.group_send(
        conversation_group(conversation_id),
        {"type": "chat.event", "event": event.model_dump(mode="json")},
    )


@cache
def get_hub() -> ChatHub:
    """The process's chat engine hub."""
    from chatbridge.chat.workers import ChannelPeers  # workers imports this module

    return ChatHub(
        registry=get_registry(),
        manager=get_session_manager(),
        store=DjangoStore(),
        sink=publish,
        render_form=render_form,
        model=settings.CHATBRIDGE_MODEL,
        peers=ChannelPeers(),
    )
