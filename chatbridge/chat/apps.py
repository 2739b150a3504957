"""The web side of ChatBridge: pages, (later) the chat consumer and the admin."""

from __future__ import annotations

from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chatbridge.chat"
    label = "chatbridge_chat"
    verbose_name = "ChatBridge"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from chatbridge.chat import checks  # noqa: F401  (registers the system checks)
        from chatbridge.chat.auto_forms import read_post
        from chatbridge.chat.registry import get_registry
        from chatbridge.core.auto_form import use_form_reader

        use_form_reader(read_post)  # automatic forms' posts are read by their Django form
        get_registry()  # fail at start-up, not on the first request, if a plugin is broken
