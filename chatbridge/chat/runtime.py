"""The chat's view of the process runtime: its hub and sessions, and publishing events.

The hub and the session manager belong to the process's ``ChatBridgeRuntime``
(``chatbridge.runtime``), not to any socket: a dropped WebSocket leaves running tools and turns
alone, and a reconnecting browser finds them again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.layers import get_channel_layer

from chatbridge.core.protocol import ChatEvent

if TYPE_CHECKING:
    from chatbridge.core.engine import ChatHub
    from chatbridge.core.sessions import SessionManager

__all__ = ["conversation_group", "get_hub", "get_session_manager", "publish"]


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
    """Send ``event`` to every socket of the conversation, through the channel layer."""
    layer = get_channel_layer()
    assert layer is not None, "CHANNEL_LAYERS is not configured"
    await layer.group_send(
        conversation_group(conversation_id),
        {"type": "chat.event", "event": event.model_dump(mode="json")},
    )
