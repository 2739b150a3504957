"""Whose a chat socket is, and what it needs of its conversation, in as few reads as may be.

Channels' ``AuthMiddleware`` reads the session (and the user it names) for every socket before
the consumer runs; the chat's socket then reads its conversation. The chat's route is served
without it (``serving``): an anonymous visitor's socket, the usual one, is checked in one
statement here, the conversation's owner being ``session:<key>`` of a session that is on
record and has not expired (what Django's own load would have found). Only when that finds
nothing is the session's user read (channels' ``get_user``), for a signed-in owner's chat.
Sessions that are not database rows (another ``SESSION_ENGINE``) take that way at once.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from channels.auth import get_user
from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.utils.functional import LazyObject, empty

from chatbridge.engine.conversation import OnRecord
from chatbridge.records.outage import db_call
from chatbridge.records.store import on_record, owner_key

__all__ = ["socket_owner"]


def _session_rows() -> Any:
    """The model of the sessions' rows, or None when sessions are not database rows (read
    from the settings each time: a test may change ``SESSION_ENGINE``)."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    return store.get_model_class() if issubclass(store, DatabaseSessionStore) else None


async def socket_owner(scope: Any, conversation_id: str) -> tuple[str | None, OnRecord | None]:
    """The socket's owner key and its conversation as ``on_record`` reads it (None: not the
    owner's, or no such conversation). The session's user is read only when needed."""
    session = scope.get("session")
    key = session.session_key if session is not None else None
    rows = _session_rows()
    if key and rows is not None:
        owner = owner_key(None, key)
        seen = await db_call(on_record, conversation_id, owner, rows, key)
        if seen is not None:
            return owner, seen
    user = scope.get("user")  # resolved already where channels' AuthMiddleware ran
    if user is None or (isinstance(user, LazyObject) and user._wrapped is empty):
        user = await get_user(scope)  # the session's user (AnonymousUser if none)
    owner = owner_key(user, key)
    if owner is None or (rows is not None and owner == owner_key(None, key)):
        return owner, None  # read already: not this visitor's
    return owner, await db_call(on_record, conversation_id, owner)
