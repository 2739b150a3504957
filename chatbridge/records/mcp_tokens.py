"""Users' MCP tokens: issued (shown once), looked up by their hash, revoked.

A token is ``cbmcp_`` and 32 random bytes (URL-safe base64); the table keeps its sha256 and its
first characters, so an operator can tell tokens apart without being able to use them.
Revoking a token refuses its next request, and aborts the calls made with it that are still
live wherever they run (their next round trip would be refused anyway: this ends them now,
on record, instead of leaving them to time out).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from chatbridge.chat.models import ACTIVE_STATUSES, McpToken, ToolSession
from chatbridge.chat.operations import abort_tool_session

__all__ = ["PREFIX", "TokenOwner", "find_token", "issue_token", "revoke_tokens", "token_hash"]

PREFIX = "cbmcp_"
SHOWN = len(PREFIX) + 6  # characters kept in the clear: enough to tell tokens apart
LAST_USED_EVERY = timedelta(minutes=1)  # ``last_used_at`` is written at most this often
REVOKED = "its MCP token was revoked"


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
    """Revoke the live tokens among ``tokens``; abort the live calls made with them.
    Returns (tokens revoked, calls aborted)."""
    ids = list(tokens.filter(revoked_at=None).values_list("pk", flat=True))
    McpToken.objects.filter(pk__in=ids).update(revoked_at=timezone.now(), revoked_by=operator)
    live: list[Any] = list(
        ToolSession.objects.filter(
            status__in=ACTIVE_STATUSES, meta__token_id__in=[str(i) for i in ids]
        )
    )
    for session in live:
        abort_tool_session(session, operator=operator, reason=REVOKED)
    return len(ids), len(live)
