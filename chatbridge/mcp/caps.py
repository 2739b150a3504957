"""Caps per MCP caller: legacy sessions open at once, tool calls live at once.

A caller is its ``Caller.quota``: a user (their MCP tokens), or a client address (anonymous
callers and the shared token's holders). One caller at its cap is refused in words — a 429
with ``Retry-After`` for a new session, a JSON-RPC error for a call — and nobody else notices:
every other caller keeps its own room. The counts are this worker's (each worker holds its
own legacy sessions and runs its own calls).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping

from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from chatbridge.calls.sessions import PluginSession
from chatbridge.mcp.callers import Refusal

__all__ = ["TOO_MANY_CALLS", "CallCaps", "SessionCaps", "opens_session"]

# A JSON-RPC error code of the implementation-defined server range (-32000 to -32099).
TOO_MANY_CALLS = -32029


def opens_session(scope: Mapping[str, object]) -> bool:
    """Would the SDK open a legacy session for this request? A POST without a session id,
    on a handshake-era protocol (2026-07-28 requests are stateless: they open none)."""
    if scope.get("method") != "POST":
        return False
    headers = scope.get("headers") or ()
    assert isinstance(headers, list | tuple)
    names = {k.lower(): v for k, v in headers}
    version = names.get(b"mcp-protocol-version")
    if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
        return False
    return b"mcp-session-id" not in names


class SessionCaps:
    """Legacy sessions per caller, counted from the SDK's own record of open sessions
    (``is_open``), so however a session ends — DELETE, idle expiry, shutdown — its room is
    free again at once."""

    def __init__(
        self, limit: int | None, is_open: Callable[[str], bool], retry_after: int = 30
    ) -> None:
        self.limit, self.is_open, self.retry_after = limit, is_open, retry_after
        self._opening: Counter[str] = Counter()  # requests opening one, being answered
        self._open: dict[str, set[str]] = {}  # quota → ids of its sessions

    def count(self, quota: str) -> int:
        ids = self._open.get(quota)
        if ids:
            ids.difference_update([i for i in ids if not self.is_open(i)])
            if not ids:
                del self._open[quota]
        return len(self._open.get(quota, ())) + self._opening[quota]

    def admit(self, quota: str) -> None:
        """Count a request that opens a session; ``Refusal`` (429) at the caller's cap."""
        if self.limit is not None and self.count(quota) >= self.limit:
            raise Refusal(
                429,
                "too_many_sessions",
                f"You have {self.limit} MCP sessions open, the most one caller may have "
                "(CHATBRIDGE_MCP_MAX_SESSIONS_PER_CALLER): end one (HTTP DELETE with its "
                "Mcp-Session-Id) or reuse it. Idle sessions expire by themselves.",
                [(b"retry-after", str(self.retry_after).encode())],
            )
        self._opening[quota] += 1

    def opened(self, quota: str, session_id: str | None) -> None:
        """The opening request was answered: with a session id if it opened one."""
        self._opening[quota] -= 1
        if self._opening[quota] <= 0:
            del self._opening[quota]
        if session_id:
            self._open.setdefault(quota, set()).add(session_id)


class CallCaps:
    """Tool calls live at once per caller: from the call's start to its end (a 2026-07-28
    call or a task stays live between its round trips)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._live: Counter[str] = Counter()
        self._waiters: set[asyncio.Task[object]] = set()

    def live(self, quota: str) -> int:
        return self._live[quota]

    def admit(self, quota: str) -> Ticket:
        """Count a call about to start; ``MCPError`` in words at the caller's cap."""
        if self.limit is not None and self._live[quota] >= self.limit:
            raise MCPError(
                TOO_MANY_CALLS,
                f"You have {self.limit} tool calls running, the most one caller may have at "
                "once (CHATBRIDGE_MCP_MAX_CALLS_PER_CALLER): wait for one to end, or cancel "
                "one, then call again.",
                data={"limit": self.limit},
            )
        self._live[quota] += 1
        return Ticket(self, quota)

    def _release(self, quota: str) -> None:
        self._live[quota] -= 1
        if self._live[quota] <= 0:
            del self._live[quota]


class Ticket:
    """One admitted call's place under its caller's cap, held until the call ends."""

    def __init__(self, caps: CallCaps, quota: str) -> None:
        self.caps, self.quota, self.held = caps, quota, True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.caps._release(self.quota)

    def follow(self, session: PluginSession | None) -> None:
        """Hold the place until ``session`` ends (release now if it has, or never started)."""
        if session is None or session.finished:
            self.release()
            return
        waiter: asyncio.Task[object] = asyncio.get_running_loop().create_task(
            session.wait_finished()
        )
        self.caps._waiters.add(waiter)

        def done(task: asyncio.Task[object]) -> None:
            self.caps._waiters.discard(task)
            self.release()

        waiter.add_done_callback(done)
