"""WebSocket routes, and the scope key saying an HTTP request came through an application that
serves them (``chatbridge.serving.get_asgi_application``): the chat's page asks, when its socket
cannot connect, whether this server serves sockets at all (``views.connection``)."""

from __future__ import annotations

from django.urls import path

from chatbridge.chat.consumers import ChatConsumer

SOCKETS_SERVED = "chatbridge.sockets"

websocket_urlpatterns = [
    path("ws/chat/<uuid:conversation_id>/", ChatConsumer.as_asgi()),
]
