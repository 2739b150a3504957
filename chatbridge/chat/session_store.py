"""Django's database sessions, a new one written once (the demo site's ``SESSION_ENGINE``).

Django's ``db`` store reads whether a fresh random key exists before it writes a new session,
and the session middleware then writes a session just created once more (``create`` marks it
modified, so that its cookie is sent). Here the INSERT alone decides that a key is new
(``create`` tries another key on a clash, as Django's does), and the write after ``create`` is
skipped while the data is what was just written: a visitor's first page costs one INSERT instead
of a read, an INSERT and an UPDATE. Everything else is Django's store.

    SESSION_ENGINE = "chatbridge.chat.session_store"
"""

from __future__ import annotations

from typing import Any

from django.contrib.sessions.backends.base import VALID_KEY_CHARS
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.utils.crypto import get_random_string

__all__ = ["SessionStore"]


class SessionStore(DatabaseSessionStore):
    """See the module docstring."""

    _written: dict[str, Any] | None = None  # the data ``create`` wrote, until it changes

    def _get_new_session_key(self) -> str:
        return get_random_string(32, VALID_KEY_CHARS)  # a clash fails the INSERT: another

    def create(self) -> None:
        super().create()
        self._written = dict(self.items())  # held in memory: nothing is read

    def save(self, must_create: bool = False) -> None:
        written, self._written = self._written, None
        if not must_create and written is not None and written == dict(self.items()):
            return  # just created with this data: the INSERT holds it
        super().save(must_create=must_create)
