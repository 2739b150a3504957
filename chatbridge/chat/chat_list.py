"""Which chats the sidebar lists: the owner's, newest first, a page at a time, narrowed by a
search of their titles. Only ever the owner's: every query starts from ``owner``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Exists, OuterRef, Q

from chatbridge.records.models import UNTITLED, Conversation, Message

__all__ = ["PAGE_SIZE", "ChatList", "chat_list", "has_messages"]

PAGE_SIZE = 50
MAX_QUERY = 120  # characters of a search that are used (a title has at most 120)
MAX_WORDS = 8
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def has_messages() -> Exists:
    """True for a conversation with at least one message."""
    return Exists(Message.objects.filter(conversation=OuterRef("pk")))


@dataclass(frozen=True)
class ChatList:
    """One page of the sidebar's list: its chats, the search that chose them, and where the
    next page starts (``more``, a cursor for ``before``; "" when this page is the last)."""

    chats: list[Conversation]
    query: str
    more: str


def cursor(chat: Conversation) -> str:
    """Where a page ends: the last chat's time (in microseconds) and id, so that a chat moving
    to the top meanwhile neither repeats nor skips one in the next page."""
    return f"{(chat.updated_at - _EPOCH) // _MICROSECOND}_{chat.pk.hex}"


def _after(before: str) -> Q | None:
    """The chats listed after the ``cursor`` ``before`` (None when it is not one)."""
    micros, _, pk = before.partition("_")
    try:
        when = _EPOCH + int(micros) * _MICROSECOND
        key = uuid.UUID(hex=pk)
    except (ValueError, OverflowError):
        return None
    return Q(updated_at__lt=when) | Q(updated_at=when, pk__lt=key)


def clean_query(query: str) -> str:
    """The search as it is used: its words, one space apart, NULs dropped (PostgreSQL takes
    none), at most ``MAX_QUERY`` characters."""
    return " ".join(query.replace("\x00", "").split())[:MAX_QUERY]


def chat_list(owner: str, current: Conversation, query: str = "", before: str = "") -> ChatList:
    """The page of ``owner``'s chats after ``before`` (the first page when empty): those with
    messages and ``current`` even empty, or with ``query`` those whose title holds each of its
    words (case-insensitive). ``current`` is always in the first page, once: an open chat older
    than the page's newest ones comes last in it, and no later page lists it again."""
    query = clean_query(query)
    listed = Conversation.objects.filter(owner=owner).filter(has_messages() | Q(pk=current.pk))
    for word in query.split()[:MAX_WORDS]:
        listed = listed.filter(title__icontains=word)
    if query:
        listed = listed.exclude(title=UNTITLED)  # "New chat" is a placeholder, not a title
    if before:
        after = _after(before)
        if after is None:
            return ChatList([], query, "")
        listed = listed.filter(after)
        if not query:
            listed = listed.exclude(pk=current.pk)  # the first page listed it
    chats = list(listed.order_by("-updated_at", "-pk")[: PAGE_SIZE + 1])
    more = cursor(chats[PAGE_SIZE - 1]) if len(chats) > PAGE_SIZE else ""
    shown = chats[:PAGE_SIZE]
    if not before and not query and current not in shown:
        shown.append(current)
    return ChatList(shown, query, more)
