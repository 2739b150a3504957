"""A revoked user token on this worker: its open requests closed, its live calls aborted.

Revoking a token (``chatbridge.records.mcp_tokens.revoke_tokens``) is a fact on record, the
token's ``revoked_at``; no message has to reach the workers. Each worker checks the tokens of
what it holds (requests in flight, SSE streams among them, and the live calls made with a
token) every ``every`` seconds while it holds any — a worker that holds none asks nothing — and
at once when woken (a revocation made in this process wakes it; a wake-up only hastens the
check, a lost one delays it by ``every`` at most). For a token found revoked, here:

- every live call made with it is aborted, ``at_once`` at a time, with the reason and by the
  operator on record; a call that committed follows its commitment (it finishes, or is stopped
  at its open question to compensate);
- every request made with it that is still open gets ``grace`` seconds to end by itself (a legacy
  call's stream sends the aborted call's result, then ends), then its app is told that the
  client went away (and is cancelled if it does not end within ``grace`` more), and the response
  ends: an event stream's last chunk, or a 401 if nothing was sent yet.

Its next request is refused (401) by ``McpEndpoint.identify``, which reads the token on record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, MutableMapping
from typing import Any

from chatbridge.asgi_types import ASGIApp, Message, Receive, Scope, Send
from chatbridge.calls.manager import SessionManager
from chatbridge.calls.sessions import PluginSession
from chatbridge.records.mcp_tokens import REVOKED

__all__ = ["CHECK_EVERY", "Revocations", "RevokedAmong", "Subscribe", "token_of"]

logger = logging.getLogger("chatbridge.mcp")

CHECK_EVERY = 1.0  # seconds between checks while this worker holds something of a token
GRACE = 1.0  # seconds a revoked token's request has to end by itself, then to end when told
ABORTS_AT_ONCE = 16

# The ids among these tokens' that are revoked, each with who revoked it ("operator <name>").
RevokedAmong = Callable[[frozenset[str]], Awaitable[Mapping[str, str]]]
# Subscribes a wake-up (callable from any thread) to the revocations made in this process;
# returns what unsubscribes it.
Subscribe = Callable[[Callable[[], None]], Callable[[], None]]
Refuse = Callable[[Send], Awaitable[None]]


def token_of(meta: Mapping[str, str]) -> str:
    """The id of the user's MCP token a request or call was made with ("" for none)."""
    return str(meta.get("token_id") or "")


class _Open:
    """One request of a token, open here: ``revoked`` is set once the token is."""

    __slots__ = ("revoked", "token")

    def __init__(self, token: str) -> None:
        self.token, self.revoked = token, asyncio.Event()


class Revocations:
    """What this worker holds of users' tokens, ended when a token is revoked (see the module
    docstring)."""

    def __init__(
        self,
        manager: SessionManager,
        revoked_among: RevokedAmong,
        *,
        subscribe: Subscribe | None = None,
        every: float = CHECK_EVERY,
        grace: float = GRACE,
        at_once: int = ABORTS_AT_ONCE,
    ) -> None:
        self.manager, self.revoked_among, self.subscribe = manager, revoked_among, subscribe
        self.every, self.grace, self.at_once = every, grace, at_once
        self._open: dict[str, set[_Open]] = {}
        self._revoked: dict[str, str] = {}  # token id → who revoked it (revocation is final)
        self._aborting: set[str] = set()  # calls aborted here that may not have ended yet
        self._loop: asyncio.AbstractEventLoop | None = None
        self._woken: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._work: set[asyncio.Task[None]] = set()
        self._unsubscribe: Callable[[], None] | None = None

    def start(self) -> None:
        """Check on the running loop until ``aclose()``."""
        if self._task is not None:
            raise RuntimeError("these revocations are being checked already")
        self._loop = asyncio.get_running_loop()
        self._woken = asyncio.Event()
        self._task = self._loop.create_task(self._run(), name="chatbridge-mcp-revocations")
        if self.subscribe is not None:
            self._unsubscribe = self.subscribe(self.wake)

    async def aclose(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        tasks = {t for t in (self._task, *self._work) if t is not None}
        self._task, self._work = None, set()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def wake(self) -> None:
        """Check now (from any thread): a token may have been revoked."""
        loop, woken = self._loop, self._woken
        if loop is None or woken is None or self._task is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to check
            loop.call_soon_threadsafe(woken.set)

    async def _run(self) -> None:
        assert self._woken is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), self.every)
            self._woken.clear()
            try:
                await self.check()
            except Exception as exc:  # the database away: the next check tries again
                logger.warning("checking MCP tokens for revocation failed: %r", exc)

    # -- one check --------------------------------------------------------------------------

    def _calls(self) -> list[PluginSession]:
        found = (self.manager.get(info.id) for info in self.manager.list_active())
        return [s for s in found if s is not None and token_of(s.meta)]

    async def check(self) -> None:
        """Read on record whether the tokens of what this worker holds are revoked; end what
        it holds of those that are."""
        calls = self._calls()
        self._aborting &= {s.id for s in calls}
        held = {token_of(s.meta) for s in calls} | {t for t, opened in self._open.items() if opened}
        unknown = frozenset(held - self._revoked.keys())
        if unknown:
            self._revoked.update(await self.revoked_among(unknown))
        for token in held & self._revoked.keys():
            self._end(token, self._revoked[token], calls)

    def _end(self, token: str, by: str, calls: Iterable[PluginSession]) -> None:
        theirs = [s for s in calls if token_of(s.meta) == token and s.id not in self._aborting]
        if theirs:
            self._aborting.update(s.id for s in theirs)
            logger.info("MCP token %s was revoked: aborting %d call(s) here", token, len(theirs))
            self._later(self._abort(theirs, by))
        for opened in self._open.get(token, ()):
            opened.revoked.set()

    async def _abort(self, calls: list[PluginSession], by: str) -> None:
        slots = asyncio.Semaphore(self.at_once)

        async def abort(session: PluginSession) -> None:
            async with slots:
                try:
                    await session.abort(REVOKED, by=by)
                except Exception:
                    logger.exception("aborting call %s of a revoked token failed", session.id)

        await asyncio.gather(*(abort(s) for s in calls))

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    # -- the requests of a token ------------------------------------------------------------

    async def serve(
        self, token: str, app: ASGIApp, scope: Scope, receive: Receive, send: Send, refuse: Refuse
    ) -> None:
        """Serve a request made with ``token`` by ``app``, ended as the module docstring says
        if the token is revoked meanwhile (``refuse`` answers if nothing was sent yet)."""
        opened = _Open(token)
        self._open.setdefault(token, set()).add(opened)
        if token in self._revoked:
            opened.revoked.set()
        try:
            await _closable(app, scope, receive, send, opened.revoked, self.grace, refuse)
        finally:
            bucket = self._open.get(token)
            if bucket is not None:
                bucket.discard(opened)
                if not bucket:
                    del self._open[token]


async def _closable(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    revoked: asyncio.Event,
    grace: float,
    refuse: Refuse,
) -> None:
    """``app`` serving the request, ended once ``revoked`` is set (see ``Revocations.serve``)."""
    started = complete = closed = False
    sending = asyncio.Lock()
    gone = asyncio.Event()  # the app is told the client went away

    async def guarded_send(message: MutableMapping[str, Any]) -> None:
        nonlocal started, complete
        async with sending:
            if closed:
                return  # the response was ended here: nothing more goes out
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                complete = True
            await send(message)

    async def guarded_receive() -> Message:
        if gone.is_set():
            return {"type": "http.disconnect"}
        got = asyncio.ensure_future(receive())
        left = asyncio.ensure_future(gone.wait())
        try:
            await asyncio.wait({got, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
        if got.done():
            return got.result()
        got.cancel()
        return {"type": "http.disconnect"}

    served = asyncio.ensure_future(app(scope, guarded_receive, guarded_send))
    told = asyncio.ensure_future(revoked.wait())
    try:
        done, _ = await asyncio.wait({served, told}, return_when=asyncio.FIRST_COMPLETED)
        if served in done:
            served.result()  # what the app raised, as if it had been called directly
            return
        await asyncio.wait({served}, timeout=grace)  # a call's stream ends by itself
        if not served.done():
            gone.set()
            await asyncio.wait({served}, timeout=grace)
        if not served.done():
            served.cancel()
            await asyncio.wait({served})
    finally:
        told.cancel()
        if not served.done():  # this request itself was cancelled (the server stops)
            served.cancel()
            await asyncio.wait({served})
    async with sending:
        closed = True
    if not served.cancelled() and served.exception() is not None:
        logger.info("a request of a revoked MCP token ended with %r", served.exception())
    if not started:
        await refuse(send)
    elif not complete:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
