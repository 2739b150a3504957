"""The web side of ChatBridge: pages, (later) the chat consumer and the admin."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created


class ChatConfig(AppConfig):
    name = "chatbridge.chat"
    label = "chatbridge_chat"
    verbose_name = "ChatBridge"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.translation import gettext

        from chatbridge import access_logs
        from chatbridge.author.auto_form import use_form_reader
        from chatbridge.author.language import use_translator
        from chatbridge.chat import checks  # noqa: F401  (registers the system checks)
        from chatbridge.chat.auto_forms import read_post
        from chatbridge.chat.sqlite_files import make_private
        from chatbridge.installed_plugins import get_registry

        access_logs.install()  # link tokens never reach the access log
        connection_created.connect(make_private, dispatch_uid="chatbridge-private-sqlite")
        use_translator(gettext)  # the runtime's words in the person's language
        use_form_reader(read_post)  # automatic forms' posts are read by their Django form
        get_registry()  # fail at start-up, not on the first request, if a plugin is broken
