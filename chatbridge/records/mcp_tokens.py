"""Users' MCP tokens: issued (shown once), looked up by their hash, revoked.

A token is ``cbmcp_`` and 32 random bytes (URL-safe base64); the table keeps its sha256 and its
first characters, so an operator can tell tokens apart without being able to use them.
Revoking a token refuses its next request, and ends what it has open wherever it runs: the
revocation is on record (``revoked_at``) and each worker, checking the tokens of what it holds
every second (``chatbridge.mcp.revocation``), aborts the live calls made with it there and
closes its open requests and event streams; a call that no running worker holds is ended here,
on record through its lease. (Their next round trip would be refused anyway: this ends them
now, on record, instead of leaving them to time out.)
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.dispatch import Signal
from django.utils import timezone

from chatbridge.calls.outcome import OPERATOR
from chatbridge.records.liveness import worker_alive
from chatbridge.records.models import ACTIVE_STATUSES, McpToken, ToolSession
from chatbridge.records.orphans import end_unheld

__all__ = [
    "PREFIX",
    "REVOKED",
    "TokenOwner",
    "find_token",
    "issue_token",
    "on_revocation",
    "revoke_tokens",
    "revoked_among",
    "token_hash",
]

REVOKED = "its MCP token was revoked"  # why its calls were aborted (``abort_reason``)
PREFIX = "cbmcp_"
SHOWN = len(PREFIX) + 6  # characters kept in the clear: enough to tell tokens apart
LAST_USED_EVERY = timedelta(minutes=1)  # ``last_used_at`` is written at most this often
# Sent once a revocation is committed (``token_ids``): wakes this process's MCP endpoint.
tokens_revoked = Signal()


@dataclass(frozen=True)
class TokenOwner:
    """What a valid token proves: its user and which of the user's tokens it is."""

    token_id: int
    user_id: int
    username: str
    name: str

    @property
    def identity(self) -> str:
        return f"user:{self.user_id}"

    def meta(self) -> dict[str, str]:
        """Kept with each call made with the token (the admin shows whose call it is)."""
        return {
            "user": self.username,
            "user_id": str(self.user_id),
            "token": self.name,
            "token_id": str(self.token_id),
        }


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_token(token: McpToken) -> str:
    """Give ``token`` (unsaved: its user and name set) a new secret; save it; return the
    secret, which is never stored and cannot be shown again."""
    secret = PREFIX + secrets.token_urlsafe(32)
    token.token_hash, token.prefix = token_hash(secret), secret[:SHOWN]
    token.save()
    return secret


def find_token(secret: str) -> TokenOwner | None:
    """The owner of a valid (known, not revoked, active user) token, or None."""
    row = (
        McpToken.objects.filter(
            token_hash=token_hash(secret), revoked_at=None, user__is_active=True
        )
        .values_list("pk", "user_id", "user__username", "name", "last_used_at")
        .first()
    )
    if row is None:
        return None
    pk, user_id, username, name, last_used = row
    now = timezone.now()
    if last_used is None or now - last_used > LAST_USED_EVERY:
        stale = Q(last_used_at=None) | Q(last_used_at__lt=now - LAST_USED_EVERY)
        McpToken.objects.filter(stale, pk=pk).update(last_used_at=now)
    return TokenOwner(pk, user_id, username, name)


def revoke_tokens(tokens: QuerySet[McpToken], operator: str) -> tuple[int, int]:
    """Revoke the live tokens among ``tokens``; their live calls are aborted wherever they run.
    Returns (tokens revoked, calls aborted).

    Nothing here waits for a worker: the revocation on record is what every worker acts on
    (within a second: ``chatbridge.mcp.revocation``), and a call whose holder is gone is ended
    here, through its lease (one that committed keeps the request to stop, for the worker that
    resumes it: it finishes or compensates). On SQLite this runs on the process's one database
    thread, which the calls held here need to record their end: waiting for them here would
    stall them."""
    ids = list(tokens.filter(revoked_at=None).values_list("pk", flat=True))
    McpToken.objects.filter(pk__in=ids, revoked_at=None).update(
        revoked_at=timezone.now(), revoked_by=operator
    )
    live = ToolSession.objects.filter(
        status__in=ACTIVE_STATUSES, meta__token_id__in=[str(i) for i in ids]
    )
    # On record before any worker ends a call: whoever renders the ended call finds it.
    live.update(abort_reason=REVOKED)
    calls = list(live.values_list("pk", "worker"))
    alive: dict[str, bool] = {}
    for call_id, holder in calls:
        if holder not in alive:
            alive[holder] = worker_alive(holder)
        if not alive[holder]:
            end_unheld(call_id, holder, by=f"{OPERATOR}{operator}", reason=REVOKED)
    if ids:
        transaction.on_commit(lambda: tokens_revoked.send(McpToken, token_ids=ids))
    return len(ids), len(calls)


def revoked_among(token_ids: Iterable[str]) -> dict[str, str]:
    """Which of these tokens (ids) are revoked, each with who revoked it ("operator <name>",
    the ``aborted_by`` of the calls it made)."""
    pks = [int(t) for t in token_ids if str(t).isdigit()]
    found = McpToken.objects.filter(pk__in=pks).exclude(revoked_at=None)
    return {str(pk): f"{OPERATOR}{by}" for pk, by in found.values_list("pk", "revoked_by")}


def on_revocation(wake: Callable[[], None]) -> Callable[[], None]:
    """Call ``wake`` (in the revoking thread) after each revocation made in this process;
    returns what stops it."""

    def receiver(**_: Any) -> None:
        wake()

    def stop() -> None:
        tokens_revoked.disconnect(receiver)

    tokens_revoked.connect(receiver, weak=False)
    return stop
