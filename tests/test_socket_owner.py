"""Whose a chat socket is (``chatbridge.chat.socket_owner``): an anonymous visitor's own chat
is found with their live session in one statement, without reading the session's user; an
expired session reaches nothing; a signed-in user's chat is found through the user."""

from __future__ import annotations

from datetime import timedelta
from importlib import import_module
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.auth import UserLazyObject
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.utils import timezone
from django.utils.functional import empty

from chatbridge.chat.socket_owner import socket_owner
from chatbridge.records.models import Conversation

pytestmark = pytest.mark.django_db(transaction=True)


def new_session(**data: Any) -> Any:
    store = import_module(settings.SESSION_ENGINE).SessionStore()
    store.update(data)
    store.save()
    return import_module(settings.SESSION_ENGINE).SessionStore(store.session_key)


def scope_of(session: Any) -> dict[str, Any]:
    return {"session": session, "user": UserLazyObject()}  # as channels leaves it unresolved


async def test_a_visitors_own_chat_is_found_without_reading_the_user() -> None:
    session = await sync_to_async(new_session)()
    chat = await Conversation.objects.acreate(owner=f"session:{session.session_key}")
    scope = scope_of(session)
    owner, seen = await socket_owner(scope, str(chat.id))
    assert owner == f"session:{session.session_key}" and seen is not None
    assert scope["user"]._wrapped is empty  # neither the session's data nor a user was read

    stranger = await sync_to_async(new_session)()
    owner, seen = await socket_owner(scope_of(stranger), str(chat.id))
    assert (owner, seen) == (f"session:{stranger.session_key}", None)


async def test_an_expired_session_reaches_nothing() -> None:
    session = await sync_to_async(new_session)()
    chat = await Conversation.objects.acreate(owner=f"session:{session.session_key}")
    past = timezone.now() - timedelta(seconds=1)
    await Session.objects.filter(session_key=session.session_key).aupdate(expire_date=past)
    _, seen = await socket_owner(scope_of(session), str(chat.id))
    assert seen is None


async def test_a_signed_in_users_chat_is_found_through_the_user() -> None:
    user = await sync_to_async(User.objects.create_user)("ada", password="pw-123456")
    session = await sync_to_async(new_session)(
        _auth_user_id=str(user.pk),
        _auth_user_backend="django.contrib.auth.backends.ModelBackend",
        _auth_user_hash=user.get_session_auth_hash(),
    )
    chat = await Conversation.objects.acreate(owner=f"user:{user.pk}")
    owner, seen = await socket_owner(scope_of(session), str(chat.id))
    assert owner == f"user:{user.pk}" and seen is not None
    owner, seen = await socket_owner({"session": session}, str(chat.id))  # no user in scope
    assert owner == f"user:{user.pk}" and seen is not None
