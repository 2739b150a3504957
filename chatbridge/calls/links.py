"""URL-mode questions: the links a session hands out, and what a plugin's page receives.

A question asked with ``ctx.elicit_url`` is answered on a page of its own (a payment, a
credential) instead of in a form the host draws: sensitive input never passes through the
chat, the model, the journal or an MCP client. The session asks its ``UrlLinks`` for the
question's one-time link before showing it; the page reports the answer, which reaches the
session like any other, and the links remember it so that a call resumed after a restart (or
a question asked again by replay) finds it answered and goes on at once.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from chatbridge.author.elicit import Accept, ElicitResult, validate_result
from chatbridge.author.exceptions import ElicitNotPending, LinkUnusable

if TYPE_CHECKING:
    from chatbridge.author.elicit import ElicitRequest
    from chatbridge.calls.manager import SessionManager

__all__ = ["MemoryUrlLinks", "OpenedLink", "UrlLinks"]


@dataclass(frozen=True)
class OpenedLink:
    """A URL question's link, and what its page reported already (while no session held the
    question: the server was restarting, or an earlier run of a replayed call), read in the
    same visit to the record."""

    url: str
    answer: ElicitResult[Any] | None = None


class UrlLinks(Protocol):
    """Hands out the one-time link of each URL question and keeps what its page reported.

    The chat layer implements it with the database (``chatbridge.records.url_links``); a
    ``SessionManager`` without one refuses URL questions.
    """

    async def open(self, request: Any, meta: Mapping[str, str]) -> OpenedLink:
        """The absolute link of ``request`` (an ``ElicitRequest``), the same each time the
        same question is asked while it has not expired, with what its page reported already.
        ``meta`` is the session's (``origin`` makes the link absolute)."""
        ...

    async def answer(self, request: Any) -> ElicitResult[Any] | None:
        """What the page reported for ``request`` (read again after a ``close`` lost to the
        page), or ``None``."""
        ...

    async def close(self, request: Any) -> bool:
        """The question is over (answered, declined, expired or aborted): its link stops
        working. False when its page had answered first: a host's Decline or Cancel closing
        the question must then give way to the page's answer (a payment that went through)."""
        ...


@dataclass
class _Link:
    token: str
    request: ElicitRequest
    answer: ElicitResult[Any] | None = None
    closed: bool = False


class MemoryUrlLinks:
    """``UrlLinks`` kept in memory, for a ``SessionManager`` used without the chat layer
    (tests, scripts): links are ``<origin>/elicit/<token>/``; ``complete`` plays the page."""

    def __init__(self, origin: str = "http://testserver") -> None:
        self.origin = origin
        self._by_id: dict[str, _Link] = {}
        self._by_token: dict[str, _Link] = {}

    async def open(self, request: ElicitRequest, meta: Mapping[str, str]) -> OpenedLink:
        link = self._by_id.get(str(request.id))
        if link is None:
            link = _Link(secrets.token_urlsafe(24), request)
            self._by_id[str(request.id)] = self._by_token[link.token] = link
        return OpenedLink(f"{meta.get('origin') or self.origin}/elicit/{link.token}/", link.answer)

    async def answer(self, request: ElicitRequest) -> ElicitResult[Any] | None:
        link = self._by_id.get(str(request.id))
        return link.answer if link is not None else None

    async def close(self, request: ElicitRequest) -> bool:
        link = self._by_id.get(str(request.id))
        if link is None:
            return True
        link.closed = True
        return link.answer is None

    async def complete(
        self, token: str, content: BaseModel | Mapping[str, Any], manager: SessionManager
    ) -> None:
        """What a page does when done: record the answer, then hand it to the live call."""
        link = self._by_token.get(token)
        if link is None:
            raise LinkUnusable("unknown")
        if link.closed or link.answer is not None:
            raise LinkUnusable("used")
        request = link.request
        answer = validate_result(
            Accept(content), request.schema.model, str(request.id), context=request.context
        )
        link.answer = answer
        session = manager.get(request.call_id)
        if session is not None:
            # Not asked right now: the call finds the answer when it asks.
            with contextlib.suppress(ElicitNotPending):
                await session.respond_to_elicit(request.id, answer, by_page=True)
