"""A legacy MCP call whose request ended early: cancelled by its client
(``notifications/cancelled``) or cut off with its session (idle expiry, DELETE).

The call is aborted in a task of its own, which nothing cancels. One that had committed (a
payment taken, ``.commits()``) is not stopped: it finishes or compensates, and its client, if
still connected, is told how it ended in a log notification (its cancelled request has no
response any more).
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning

from chatbridge.calls.outcome import BY_CLIENT
from chatbridge.calls.sessions import PluginSession
from chatbridge.mcp.levels import hears

__all__ = ["CANCELLED_BY", "CLIENT_CANCELLED", "CLIENT_GONE", "Cancellations"]

CLIENT_GONE = "the MCP client went away"
CLIENT_CANCELLED = "the MCP client cancelled the call"
CANCELLED_BY = BY_CLIENT  # aborted_by of a call its client cancelled


def cancelled_by_client(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Was the request cancelled by the client's ``notifications/cancelled`` (rather than by
    its session ending)? The SDK (2.3) keeps that on the request's dispatch context, which the
    lowlevel context reaches only through its session."""
    outbound = getattr(ctx.session, "_request_outbound", None)
    event = getattr(outbound, "cancel_requested", None)
    return bool(event is not None and event.is_set())


class Cancellations:
    """The aborts of calls whose request ended, each in a task kept until it is done."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def abort_later(self, session: PluginSession, ctx: ServerRequestContext[Any, Any]) -> None:
        if session.finished:
            return
        task = asyncio.get_running_loop().create_task(self._abort(session, ctx))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _abort(session: PluginSession, ctx: ServerRequestContext[Any, Any]) -> None:
        cancelled = cancelled_by_client(ctx)
        reason = CLIENT_CANCELLED if cancelled else CLIENT_GONE
        if await session.abort(reason, by=CANCELLED_BY if cancelled else None) in (
            "aborted",
            "ended",
        ):
            return
        ended = await session.wait_finished()
        note = getattr(ended, "commitment", None)
        if note is None or not note.text() or not hears(ctx, "warning"):
            return
        data = {"call": session.id, "message": note.text(), "commitment": note.to_dict()}
        if ended.type == "completed":
            data["result"] = ended.result
        # Not on the cancelled request's stream (it has none now): the session's own.
        with warnings.catch_warnings(), contextlib.suppress(Exception):  # the client is gone
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await ctx.session.send_log_message("warning", data, logger="chatbridge")
