"""One runtime per process: the objects that outlive any request, started and closed together.

``ChatBridgeRuntime`` owns the ``SessionManager`` (every tool call, chat or MCP), the chat hub
(every conversation's turn), the database writer, the worker listener (operators' list and
abort requests, answers routed from other workers) and the MCP endpoint with the SDK's session
manager. Nothing in it starts itself on first use: the server starts the runtime before it
serves anything and closes it when it stops —

- uvicorn (and any server with the ASGI lifespan): ``lifespan`` in ``application`` (use
  ``--lifespan on``);
- daphne, which has no lifespan: hooks on its reactor's start and shutdown (``daphne_hooks``);
- tests: ``async with ChatBridgeRuntime.from_settings():``.

Closing drains: new commands are refused, calls working between questions get a moment to
reach their next question, then every live call is parked (it stays suspended on record, its
journal durable, and is resumed by replay after a restart), queued writes are flushed, the MCP
sessions and the listener stop.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any

from asgiref.sync import markcoroutinefunction

from chatbridge.asgi_types import ASGIApp, Receive, Scope, Send
from chatbridge.calls.transports import HELD_BY_REQUEST  # see ``_end_calls_held_by_requests``
from chatbridge.conf import setting

if TYPE_CHECKING:
    from chatbridge.engine.tool_calls import FormRenderer

__all__ = [
    "READY_PATH",
    "ChatBridgeRuntime",
    "RuntimeNotRunning",
    "current_runtime",
    "daphne_hooks",
    "lifespan",
]

logger = logging.getLogger("chatbridge")


class RuntimeNotRunning(RuntimeError):
    """Something needed the process's runtime and none is running."""

    def __init__(self) -> None:
        super().__init__(
            "The ChatBridge runtime is not running: serve the app with the ASGI lifespan on "
            "(uvicorn --lifespan on) or with daphne, or start a ChatBridgeRuntime in tests."
        )


RESTARTING = "the server is restarting; call the tool again"
READY_PATH = "/readyz"  # a balancer's readiness check (``lifespan``)

_current: ChatBridgeRuntime | None = None
_starting: asyncio.Future[None] | None = None  # daphne: requests wait for the start-up


def current_runtime() -> ChatBridgeRuntime:
    """The running runtime of this process, or ``RuntimeNotRunning``."""
    if _current is None:
        raise RuntimeNotRunning()
    return _current


class ChatBridgeRuntime:
    """The process's long-lived parts (see the module docstring)."""

    def __init__(self, *, drain_grace: float = 2.0, listen: bool = True) -> None:
        # Imported here: building the parts needs Django's apps ready (models, templates).
        from chatbridge.author.sampling import LiteLLMSampler
        from chatbridge.calls.manager import SessionManager
        from chatbridge.cluster.broadcast import Broadcast, Viewers
        from chatbridge.cluster.listener import WorkerListener
        from chatbridge.cluster.peers import ChannelPeers
        from chatbridge.cluster.record_watch import RecordWatch
        from chatbridge.cluster.takeover import Takeover
        from chatbridge.engine.engine import ChatHub
        from chatbridge.installed_plugins import get_registry
        from chatbridge.mcp.endpoint import build_mcp_endpoint
        from chatbridge.mcp.parked import ParkedCalls
        from chatbridge.records.recorder import DjangoRecorder
        from chatbridge.records.retention import Retention
        from chatbridge.records.store import DjangoStore
        from chatbridge.records.url_links import DjangoUrlLinks
        from chatbridge.records.writer import Writer

        timeout = setting("CHATBRIDGE_SESSION_IDLE_TIMEOUT")
        self.drain_grace, self.listen = drain_grace, listen
        self.writer = Writer()
        recorder = DjangoRecorder()
        self.manager = SessionManager(
            sampler=LiteLLMSampler(setting("CHATBRIDGE_MODEL")),
            idle_timeout=timeout if timeout and timeout > 0 else None,
            observer=recorder,
            journal_store=recorder,  # durable and fenced: a failed write stops the call
            url_links=DjangoUrlLinks(),  # one-time links of URL questions (ctx.elicit_url)
            max_refused=setting("CHATBRIDGE_MAX_REFUSED_ANSWERS"),  # the same on every transport
        )
        store = DjangoStore()
        # What the other workers show, as the listener hears it, and the events sent on it.
        self.broadcast = Broadcast(Viewers())
        self.hub = ChatHub(
            registry=get_registry().serving("chat"),  # a tool served over MCP only is not offered
            manager=self.manager,
            store=store,
            leases=store,  # one running turn per conversation across workers
            queue=store,  # messages sent while a turn runs wait on record
            limits=store,  # caps per visitor, counted across workers
            sink=self.broadcast.publish,
            render_form=_form_renderer(),
            model=setting("CHATBRIDGE_MODEL"),
            peers=ChannelPeers(),
        )
        self.mcp = build_mcp_endpoint(self.manager)
        bridge = self.mcp.bridge
        # Answers on record that no message brought (a page paid while Redis was down).
        self.record_watch = RecordWatch(self.manager, setting("CHATBRIDGE_RECHECK_SECONDS"))
        self.listener = WorkerListener(
            self.manager,
            self.hub,
            self.broadcast,
            bridge.tasks.serve_routed,
            bridge.serve_routed_round,
            self.mcp.relay.take if self.mcp.relay is not None else None,
            on_joined=self.record_watch.kick,
        )
        sweep = setting("CHATBRIDGE_COMMITMENT_SWEEP")
        self.takeover = Takeover(  # calls no live worker holds are taken over here
            self.manager,
            self.hub,
            sweep if sweep and sweep > 0 else None,
            resume_task=bridge.tasks.serving.take_over,
        )
        self.retention = Retention()  # ended calls past CHATBRIDGE_RETENTION_DAYS, hourly
        # 2026-07-28 calls and tasks parked by a worker that is gone, past their state's ttl
        self.parked = ParkedCalls(setting("CHATBRIDGE_MCP_STATE_TTL"))
        self.state = "new"  # → running → closing → closed

    @classmethod
    def from_settings(cls, **options: Any) -> ChatBridgeRuntime:
        """A runtime configured by the Django settings (not started)."""
        return cls(**options)

    @property
    def running(self) -> bool:
        return self.state == "running"

    async def start(self) -> None:
        """Start every part on the running loop and become the process's runtime."""
        global _current
        if self.state != "new":
            raise RuntimeError(f"this runtime cannot start: it is {self.state}")
        if _current is not None:
            raise RuntimeError("another ChatBridge runtime is running in this process")
        await self.writer.start()
        self.manager.start()
        await self.mcp.start()
        if self.listen:
            self.listener.start()
        self.retention.start()
        self.parked.start()
        self.record_watch.start()
        self.state = "running"
        _current = self
        self.takeover.start()  # calls no live worker holds are taken over here
        self.mcp.log_policy()
        logger.info("ChatBridge runtime started")

    async def aclose(self) -> None:
        """Drain and stop (see the module docstring). Idempotent."""
        global _current
        if self.state in ("closing", "closed"):
            return
        started = self.state == "running"
        self.state = "closing"
        try:
            if started:
                await self.takeover.aclose()
                await self.retention.aclose()
                await self.parked.aclose()
                await self.record_watch.aclose()
                await self.hub.close()  # turns stop; nothing is recorded as ended
                await self._end_calls_held_by_requests()
                parked = await self.manager.park(self.drain_grace)
                await self.mcp.aclose()
                if self.listen:
                    await self.listener.aclose()
                await self.writer.aclose()
                if parked:
                    logger.info("parked %d live tool call(s); they resume on restart", len(parked))
        finally:
            self.state = "closed"
            if _current is self:
                _current = None
            logger.info("ChatBridge runtime stopped")

    async def _end_calls_held_by_requests(self) -> None:
        """MCP calls that live inside one HTTP request (legacy push, ``_respond``) cannot be
        carried across a restart: their client's request ends here. They end on record, and
        the client is told to call the tool again, instead of being parked for nobody. One
        that has committed (a payment received) is not ended: it gets the drain's grace to
        finish and answer its request, and is otherwise parked and finished by the worker
        that resumes it."""
        for info in self.manager.list_active():
            session = self.manager.get(info.id)
            if session is None or session.meta.get("transport") not in HELD_BY_REQUEST:
                continue
            await session.abort(RESTARTING, by="server")

    async def __aenter__(self) -> ChatBridgeRuntime:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _form_renderer() -> FormRenderer:
    """What draws a question's card in the chat: ``CHATBRIDGE_FORM_RENDERER``'s function."""
    from django.core.exceptions import ImproperlyConfigured
    from django.utils.module_loading import import_string

    path = setting("CHATBRIDGE_FORM_RENDERER")
    try:
        renderer: FormRenderer = import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"CHATBRIDGE_FORM_RENDERER = {path!r} cannot be imported ({exc}); it names the "
            "function that draws a question's card, like chatbridge.chat.rendering.render_form."
        ) from exc
    return renderer


def lifespan(app: ASGIApp, factory: Callable[[], ChatBridgeRuntime]) -> ASGIApp:
    """``app`` with the ASGI lifespan: startup builds and starts a runtime, shutdown closes it.

    Every other scope goes to ``app``; while no runtime runs, HTTP gets a 503 that says why.
    ``GET /readyz`` is the readiness check of a balancer: 200 while the runtime runs, else 503
    (starting, or draining after SIGTERM), answered here, before Django (no host check, no
    session, no database).
    """

    @markcoroutinefunction  # an ASGI 3 application to servers, though it returns the awaitable
    def with_lifespan(scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # A plain function handing each scope on: a running runtime's sockets and requests
        # do not pass through (resume) this wrapper on every message they receive.
        if scope["type"] == "lifespan":
            return _serve_lifespan(factory, receive, send)
        if scope["type"] == "http" and scope["path"] == READY_PATH:
            ready = _current is not None and _current.running
            return _plain(send, 200 if ready else 503, b"ready\n" if ready else b"not ready\n")
        if _current is None:
            return _once_started(app, scope, receive, send)
        return app(scope, receive, send)

    return with_lifespan


async def _once_started(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """A scope that came before the runtime: it waits for a start under way; HTTP gets a 503
    while none runs."""
    if _current is None and _starting is not None:
        await asyncio.shield(_starting)
    if _current is None and scope["type"] == "http":
        await _unavailable(send)
        return
    await app(scope, receive, send)


async def _serve_lifespan(
    factory: Callable[[], ChatBridgeRuntime], receive: Receive, send: Send
) -> None:
    runtime: ChatBridgeRuntime | None = None
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                runtime = factory()
                await runtime.start()
            except Exception as exc:
                logger.exception("ChatBridge could not start")
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            try:
                if runtime is not None:
                    await runtime.aclose()
            except Exception as exc:
                logger.exception("ChatBridge did not shut down cleanly")
                await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
                return
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _unavailable(send: Send) -> None:
    await _plain(send, 503, str(RuntimeNotRunning()).encode())


async def _plain(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store")]
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _fresh_task(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """A task with a context of its own: reactor callbacks may run inside another task's
    context (asgiref's sync_to_async would then refuse to run, fearing a deadlock)."""
    return asyncio.get_event_loop().create_task(coro, context=contextvars.Context())


def daphne_hooks(factory: Callable[[], ChatBridgeRuntime]) -> bool:
    """Under daphne (no lifespan): start a runtime when its reactor runs, close it before the
    reactor shuts down (SIGTERM, SIGINT). False when this process is not a daphne server."""
    if "daphne.server" not in sys.modules:
        return False
    from twisted.internet import defer, reactor

    box: list[ChatBridgeRuntime] = []

    def start() -> defer.Deferred[None]:
        global _starting

        async def run() -> None:
            runtime = factory()
            await runtime.start()
            box.append(runtime)

        _starting = _fresh_task(run())
        return defer.Deferred.fromFuture(_starting)

    def stop() -> defer.Deferred[None] | None:
        if not box:
            return None
        return defer.Deferred.fromFuture(_fresh_task(box.pop().aclose()))

    reactor.callWhenRunning(start)
    reactor.addSystemEventTrigger("before", "shutdown", stop)  # type: ignore[arg-type]
    return True
