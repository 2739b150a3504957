"""How a cap per visitor, or per client address, holds across workers: the count and the write
it allows happen under the visitor's (the address's) advisory lock (PostgreSQL), and a count
reads no further than the cap. The refusals of the caps per address, in words."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.utils.functional import lazy
from django.utils.translation import ngettext

from chatbridge.author.exceptions import CommandRefused

__all__ = [
    "ADDRESS_QUEUE_LOCK",
    "ADDRESS_TURN_LOCK",
    "QUEUE_LOCK",
    "TURN_LOCK",
    "at_least",
    "lock_owner",
    "queue_full_here",
    "too_many_running_here",
]

# PostgreSQL: an enqueue holds this advisory lock (with the owner's hash) to its commit, so
# the workers' counts of one visitor's queue cannot race past the cap.
QUEUE_LOCK = 4251
# PostgreSQL: a capped turn start holds this advisory lock (with the owner's hash) to its
# commit, so workers starting a visitor's turns at once count them one after the other.
TURN_LOCK = 4252
# The same two for a client address (taken after the visitor's: always in that order).
ADDRESS_QUEUE_LOCK = 4253
ADDRESS_TURN_LOCK = 4254


def _running_here(limit: int) -> str:
    return ngettext(
        "%(count)s chat from your network is busy with a reply or a question waiting for an "
        "answer, the most we allow at once. Answer or stop it first, then send this again.",
        "%(count)s chats from your network are busy with a reply or a question waiting for an "
        "answer, the most we allow at once. Answer or stop one of them first, then send this "
        "again.",
        limit,
    ) % {"count": limit}


def _queued_here(limit: int) -> str:
    return ngettext(
        "%(count)s message from your network is waiting in a chat, the most we keep for it. "
        "Wait for the current reply to end, then send this again.",
        "%(count)s messages from your network are waiting in chats, the most we keep for it. "
        "Wait for the current replies to end, then send this again.",
        limit,
    ) % {"count": limit}


# Worded when read (``str()``), in the language active then: the socket's, not that of the
# database thread that counted.
_running_here_lazy = lazy(_running_here, str)
_queued_here_lazy = lazy(_queued_here, str)


def too_many_running_here(limit: int) -> CommandRefused:
    """The refusal of a new message while the chats of the sender's address (whatever their
    cookies) are busy up to the cap."""
    return CommandRefused("TOO_MANY_RUNNING", _running_here_lazy(limit))


def queue_full_here(limit: int) -> CommandRefused:
    """The refusal of a message past the cap on the queued messages of the sender's address."""
    return CommandRefused("QUEUE_FULL", _queued_here_lazy(limit))


def lock_owner(kind: int, owner: str) -> None:
    """On PostgreSQL, take the transaction's advisory lock ``kind`` for ``owner``: counts
    and the write they allow happen one worker at a time. Elsewhere nothing (SQLite has one
    writer at a time)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [kind, owner])


def at_least(rows: QuerySet[Any], limit: int) -> bool:
    """Whether ``rows`` holds ``limit`` rows or more, reading at most ``limit`` of them."""
    return limit <= 0 or rows[limit - 1 : limit].exists()
