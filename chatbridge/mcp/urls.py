"""URL-mode questions (``ctx.elicit_url``) on the MCP wire.

A URL question is answered on its own page (a payment): what an MCP client returns is consent,
never the answer. ``decline``/``cancel`` reach the session as ``Decline()``/``Cancel()``;
``accept`` only means the user opened the link, so the call waits for the page, whose answer the
session receives directly (``PluginSession.respond_to_elicit(by_page=True)``).

- Legacy push: ``elicitation/create`` with ``mode: "url"``, ``url`` and ``elicitationId`` (the
  question's id); once the page has answered, ``notifications/elicitation/complete`` with that
  id, so the client may stop showing the link (client/elicitation, 2025-11-25).
- 2026-07-28: the request in ``inputRequests`` (no ``elicitationId`` in that version: the key
  is the id); a retry that brings consent before the page is done is held open for a while,
  then answered with a ``requestState``-only ``input_required``, on which clients wait and
  retry (basic/patterns/mrtr); once the page is done, the retry goes on to the next question
  or the result.
- ``_respond``: the request notification carries ``mode: "url"`` and the ``url``; ``_respond``
  can decline or cancel it; the page completes it.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext

from chatbridge.author.elicit import Accept, ElicitRequest
from chatbridge.calls.sessions import PluginSession
from chatbridge.mcp.exits_wire import EXITS_META, exits_meta

__all__ = ["answered_by_page", "request_origin", "url_params"]


def request_origin(ctx: ServerRequestContext[Any, Any]) -> str:
    """scheme://host[:port] of the HTTP request, kept in a call's meta (``origin``) so that the
    links of its URL questions are absolute; "" off HTTP (``CHATBRIDGE_PUBLIC_URL`` wins)."""
    url = getattr(getattr(ctx, "request", None), "url", None)
    return f"{url.scheme}://{url.netloc}" if url is not None else ""


def url_params(request: ElicitRequest, *, with_id: bool = True) -> types.ElicitRequestURLParams:
    """The URL elicitation of ``request``; ``with_id`` on versions that carry ``elicitationId``."""
    assert request.url is not None, "the session fills in a URL question's link before asking"
    return types.ElicitRequestURLParams(
        message=request.message,
        url=request.url,
        elicitation_id=str(request.id) if with_id else None,
        _meta={EXITS_META: exits_meta(request)},
    )


def answered_by_page(session: PluginSession, request: ElicitRequest) -> bool:
    """Did ``request`` close with an answer (its page's), rather than expire or be refused?"""
    return isinstance(session.answer_of(request.id), Accept)
