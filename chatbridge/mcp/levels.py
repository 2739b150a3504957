"""Log levels per MCP session: ``logging/setLevel`` on the handshake versions.

Declaring the ``logging`` capability is a MUST for a server that sends log notifications
(server/utilities/logging); ``logging/setLevel`` sets the lowest level the client wants, for
its connection (one ``Mcp-Session-Id``). On 2026-07-28 the method is gone: each request opts
in with ``_meta["io.modelcontextprotocol/logLevel"]``, which the SDK's ``allowed_log_levels``
reads. ``hears`` combines both, so one check gates every ``notifications/message`` we send.
"""

from __future__ import annotations

from typing import Any, get_args

import mcp_types as types
from mcp.server.connection import Connection, allowed_log_levels
from mcp.server.context import ServerRequestContext

__all__ = ["hears", "set_level"]

_LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)  # least severe first
_STATE_KEY = "chatbridge.log_level"


def _connection(ctx: ServerRequestContext[Any, Any]) -> Connection:
    # The SDK (2.3.0) hands lowlevel handlers a per-request ServerSession only; the connection
    # behind it is where per-client state lives (``Connection.state``) for its whole life.
    return ctx.session._connection


async def set_level(
    ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
) -> types.EmptyResult:
    """``logging/setLevel``: from now on, this connection gets ``params.level`` and above."""
    _connection(ctx).state[_STATE_KEY] = params.level
    return types.EmptyResult()


def hears(ctx: ServerRequestContext[Any, Any], level: str) -> bool:
    """May a ``notifications/message`` at ``level`` be sent for this request?"""
    if level not in allowed_log_levels(ctx.protocol_version, ctx.meta):
        return False
    minimum = _connection(ctx).state.get(_STATE_KEY)
    return minimum is None or _LEVELS.index(level) >= _LEVELS.index(minimum)
