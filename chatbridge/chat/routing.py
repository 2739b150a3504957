"""WebSocket routes."""

from __future__ import annotations

from django.urls import path

from chatbridge.chat.consumers import ChatConsumer

websocket_urlpatterns = [
    path("ws/chat/<uuid:conversation_id>/", ChatConsumer.as_asgi()),
]
