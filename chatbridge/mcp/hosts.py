"""How an MCP request carries a session's events and questions (DESIGN §6, §9).

Every MCP call is a ``PluginSession``; the MCP side only *drives* it, like the chat's
``ToolCallRunner``: it reads ``session.next_event()``, forwards logs and progress as
notifications, puts questions to the client and hands answers back with
``session.respond_to_elicit`` (the session's question validates and counts refused answers,
and closes itself after as many as it takes: no carrier gives up on a question).

- ``PushCarrier``: legacy clients that declare elicitation get ``elicitation/create``
  mid-call, with a timeout (the question expires: the tool sees Cancel).
- ``NotifyCarrier`` (in ``respond``): clients that cannot elicit get a ``type: "request"`` log
  notification and answer with the ``_respond`` tool (BIDIR-6 option A).

Where a question's context travels (DESIGN §4): in the schema's ``x-model-context`` and in the
message's boundary section, on every era and carrier, because clients strip unknown schema
keywords (the TypeScript SDK v1's zod schemas do; a 2026-07-28 ``inputRequests`` entry is part
of a result, which the SDK sieves to the version's schema). Extraction prefers the schema and
falls back to the message. The request's ``_meta["x-model-context"]`` carries it too, for
clients that read ``_meta``; request notifications carry it as a field of their own as well.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata

from chatbridge.author.elicit import (
    Accept,
    Cancel,
    Decline,
    ElicitRequest,
    ElicitResult,
)
from chatbridge.author.exceptions import (
    ChangeRefused,
    ElicitNotPending,
    ElicitValidationError,
    TooManyRefusedAnswers,
    field_errors_text,
    refusal_text,
)
from chatbridge.author.model_context import CONTEXT_KEY, encode_message, with_context
from chatbridge.calls.drive import EndEvent, Pause
from chatbridge.calls.events import LogEvent, ProgressEvent, SessionEvent
from chatbridge.calls.sessions import PluginSession
from chatbridge.cluster.layer_health import trouble_within
from chatbridge.mcp.exits_wire import EXITS_META, ChangeTo, change_of, exits_meta
from chatbridge.mcp.levels import hears
from chatbridge.mcp.modes import ModeNotDeclared, modes_of
from chatbridge.mcp.schemas import for_version, read_back
from chatbridge.mcp.urls import answered_by_page, url_params

__all__ = [
    "Channel",
    "ClientGone",
    "PushCarrier",
    "CarrierHost",
    "deliver",
    "from_wire",
    "refused_too_often",
    "wire_request",
]

logger = logging.getLogger("chatbridge.mcp")


Ask = Callable[[ElicitRequest, str], Awaitable[ElicitResult[Any] | None]]


class ClientGone(Exception):  # noqa: N818 - names what happened, like ConnectionReset
    """The MCP client can no longer be reached (closed, cancelled or failed the request)."""


def errors_text(exc: ElicitValidationError) -> str:
    return refusal_text(field_errors_text(exc.field_errors()))


def wire_request(
    request: ElicitRequest, flat: dict[str, Any], note: str = ""
) -> types.ElicitRequestFormParams:
    """The form elicitation for ``request``: flat schema + ``x-model-context``, the message
    (``note`` after it: validation errors) with the context's boundary section last, and the
    context in ``_meta`` too (DESIGN §4: both places on every era; ``_meta`` in addition)."""
    message = f"{request.message}\n\n{note}" if note else request.message
    meta: dict[str, Any] = {EXITS_META: exits_meta(request)}
    if request.context:
        meta[CONTEXT_KEY] = request.context
    return types.ElicitRequestFormParams(
        message=encode_message(message, request.context),
        requested_schema=with_context(flat, request.context),
        _meta=meta,
    )


def from_wire(
    action: str, content: dict[str, Any] | None, meta: dict[str, Any] | None = None
) -> ElicitResult[Any]:
    """An unvalidated result from a client's ``ElicitResult`` fields (``ChangeTo`` when its
    ``_meta`` asks to change an earlier answer: ``chatbridge.mcp.exits_wire``)."""
    target = change_of(meta)
    if target:
        return ChangeTo(target=target)
    if action == "accept":
        return Accept(dict(content or {}))
    return Decline() if action == "decline" else Cancel()


async def deliver(session: PluginSession, request: ElicitRequest, answer: ElicitResult[Any]) -> str:
    """Hand ``answer`` to the session. Returns the note to ask again with, or "" when the
    question is closed: settled, or its answers were refused as often as it takes (the call
    fails; ``refused_too_often`` says so to whoever answered)."""
    try:
        if isinstance(answer, ChangeTo):
            await session.change(str(request.id), answer.target, by="its MCP client")
        else:
            await session.respond_to_elicit(request.id, answer)
    except ChangeRefused as exc:  # asked again with the reason, like a refused answer
        question = session.question
        if question is not None:
            question.refuse({}, {"change": [str(exc)]})
            if question.open:
                return str(exc)
    except ElicitValidationError as exc:
        return errors_text(exc)
    except (TooManyRefusedAnswers, ElicitNotPending):
        pass  # closed (or aborted, expired meanwhile): the session's end says what happened
    return ""


def refused_too_often(session: PluginSession, request: ElicitRequest) -> str:
    """Why ``request`` closed, if its answers were refused as often as a question allows
    (what the client that sent the last one is told), else ""."""
    closed = session.refused_too_often(request.id)
    return str(closed) if closed is not None else ""


class Channel:
    """The notifications of one MCP request: logs (where delivered) and progress.

    Progress MUST increase with each notification (basic/utilities/progress): a value not above
    the last one sent (``progressed``; a 2026-07-28 round starts from the call's previous
    round) is not sent.
    """

    def __init__(self, ctx: ServerRequestContext[Any, Any], progressed: float = -1.0) -> None:
        self.ctx, self.progressed = ctx, progressed

    @property
    def modes(self) -> frozenset[str]:
        """The elicitation modes the client of this request declared."""
        return modes_of(self.ctx)

    async def send_log(self, level: str, data: dict[str, Any], logger_name: str) -> None:
        """``notifications/message``: deprecated in 2026-07-28 (clients opt in per request with
        ``_meta["io.modelcontextprotocol/logLevel"]``; the SDK drops what they did not ask for)
        but the only notification both protocol eras deliver, so DESIGN §6 uses it. Nothing
        below the level the client asked for is sent (``levels.hears``)."""
        if not hears(self.ctx, level):
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self.ctx.session.send_log_message(
                level,  # type: ignore[arg-type]
                data,
                logger=logger_name,
                related_request_id=self.ctx.request_id,
            )

    async def forward(self, event: SessionEvent) -> None:
        try:
            if event.type == "log":
                data = {"message": event.message, **event.data}
                await self.send_log(event.level, data, "chatbridge.tool")
            elif event.type == "progress" and event.progress is not None:
                if event.progress <= self.progressed:
                    return
                self.progressed = event.progress
                await self.ctx.session.report_progress(event.progress, event.total, event.message)
        except MCPError as exc:  # a notification that cannot be sent is not the tool's problem
            logger.info("notification to the MCP client failed: %s", exc)


class RoutedChannel(Channel):
    """A request another worker received and routed here (``mcp/round_routing.py``): its
    client's modes came with it; its notifications cannot reach that client from here and
    are dropped (the result it gets back says where the call stands)."""

    def __init__(self, modes: frozenset[str], progressed: float = -1.0) -> None:
        self._modes, self.progressed = modes, progressed

    @property
    def modes(self) -> frozenset[str]:
        return self._modes

    async def send_log(self, level: str, data: dict[str, Any], logger_name: str) -> None:
        return None

    async def forward(self, event: SessionEvent) -> None:
        if event.type == "progress" and event.progress is not None:
            self.progressed = max(self.progressed, event.progress)


class CarrierHost:
    """A legacy MCP request as a ``Host`` (``chatbridge.calls.drive``): logs and progress go to
    ``channel`` as notifications, each question to ``ask`` (``PushCarrier``: pushed as
    ``elicitation/create``; ``NotifyCarrier``: announced for ``_respond``) until it is settled;
    the call's end is returned. ``completed`` is told of each URL question its page answered.
    ``ClientGone``, ``ModeNotDeclared`` (or cancellation of the MCP request) leave the session
    to the caller."""

    def __init__(
        self,
        session: PluginSession,
        channel: Channel,
        ask: Ask,
        completed: Callable[[ElicitRequest], Awaitable[None]] | None = None,
    ) -> None:
        self.session, self.channel, self.ask, self.completed = session, channel, ask, completed

    async def question(self, request: ElicitRequest) -> Pause[EndEvent] | None:
        await _put(self.session, request, self.ask, self.completed)
        return None

    async def log(self, event: LogEvent) -> None:
        await self.channel.forward(event)

    async def progress(self, event: ProgressEvent) -> None:
        await self.channel.forward(event)

    async def ended(self, event: EndEvent) -> EndEvent:
        return event


async def _put(
    session: PluginSession,
    request: ElicitRequest,
    ask: Ask,
    completed: Callable[[ElicitRequest], Awaitable[None]] | None = None,
) -> None:
    """Ask until the question is settled, the carrier settles it, or the session ends it.

    A URL question answered on its page is reported to ``completed`` before the carrier's
    request (consent, or the wait after it) is given up.
    """
    note = ""
    while True:
        asking = asyncio.ensure_future(ask(request, note))
        closed = asyncio.ensure_future(session.question_closed(request.id))
        try:
            await asyncio.wait({asking, closed}, return_when=asyncio.FIRST_COMPLETED)
            if closed.done() and completed is not None and answered_by_page(session, request):
                await completed(request)
        finally:
            closed.cancel()
            if not asking.done():
                asking.cancel()
                await asyncio.wait({asking})
        if asking.cancelled():
            return  # answered elsewhere, expired or aborted
        answer = asking.result()
        if answer is None:
            return
        note = await deliver(session, request, answer)
        if not note:
            return


class PushCarrier:
    """Legacy: ``elicitation/create`` on the call's stream, answered within ``timeout``.

    While it waits, the client is pinged every ``heartbeat`` seconds on the same stream: a
    client that crashed sends no close, and its question must not wait for nobody.
    """

    def __init__(
        self,
        ctx: ServerRequestContext[Any, Any],
        flat: dict[str, dict[str, Any]],
        timeout: float,
        session: PluginSession,
        heartbeat: float = 5.0,
    ) -> None:
        self.ctx, self.flat, self.timeout = ctx, flat, timeout
        self.session, self.heartbeat = session, heartbeat
        self.modes = modes_of(ctx)

    async def __call__(self, request: ElicitRequest, note: str) -> ElicitResult[Any] | None:
        if request.mode not in self.modes:
            raise ModeNotDeclared(request.tool_name, request.mode, self.modes)
        version = self.ctx.protocol_version
        flat = self.flat[request.key]
        params: types.ElicitRequestFormParams | types.ElicitRequestURLParams
        if request.mode == "url":
            params = url_params(request)
        else:
            params = wire_request(request, for_version(flat, version), note)
        asking = asyncio.ensure_future(
            self.ctx.session.send_request(
                types.ElicitRequest(params=params),
                types.ElicitResult,
                request_read_timeout_seconds=self.timeout,
                metadata=ServerMessageMetadata(related_request_id=self.ctx.request_id),
            )
        )
        alive = asyncio.ensure_future(self._heartbeat())
        try:
            await asyncio.wait({asking, alive}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (asking, alive):
                if not task.done():
                    task.cancel()
            await asyncio.wait({asking, alive})
            for task in (asking, alive):
                if not task.cancelled():
                    # Retrieved here: when this call was cancelled (the client cancelled it, then
                    # ended its session), nothing reads it, and asyncio logs an ERROR traceback
                    # for the "Connection closed" the request ended with.
                    task.exception()
        if not asking.done() or asking.cancelled():
            raise ClientGone("the client stopped answering pings")
        try:
            answer = asking.result()
        except MCPError as exc:
            if exc.error.code != types.REQUEST_TIMEOUT:
                raise ClientGone(exc.error.message) from exc
            logger.info("%s: no answer in %.1fs: the question expires", request.id, self.timeout)
            await self.session.expire()
            return None
        if request.mode == "url" and answer.action == "accept":
            # Consent only: the page answers. Wait (pinging) until the question closes, which
            # ends this wait from outside (``_put``).
            await self._heartbeat()
            raise ClientGone("the client stopped answering pings")
        return from_wire(answer.action, read_back(answer.content, flat, version), answer.meta)

    async def completed(self, request: ElicitRequest) -> None:
        """``notifications/elicitation/complete``: the page of ``request`` was answered."""
        try:
            await self.ctx.session.send_elicit_complete(
                str(request.id), related_request_id=self.ctx.request_id
            )
        except MCPError as exc:
            logger.info("elicitation/complete to the MCP client failed: %s", exc)

    async def _heartbeat(self) -> None:
        await pinged_out(self.ctx, self.heartbeat)


async def pinged_out(ctx: ServerRequestContext[Any, Any], every: float) -> None:
    """Ping the client of this request every ``every`` seconds on the request's stream; return
    when it fails to answer one in as long (a client that crashed sends no close), unless the
    channel layer failed meanwhile: the ping or its answer may then be stuck between two
    workers (Redis restarting), the client being there all along."""
    while True:
        await asyncio.sleep(every)
        try:
            await ctx.session.send_request(
                types.PingRequest(),
                types.EmptyResult,
                request_read_timeout_seconds=every,
                metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
            )
        except MCPError as exc:
            if trouble_within(3 * every):
                logger.info("MCP client did not answer a ping while Redis failed: %s", exc)
                continue
            logger.info("MCP client did not answer a ping: %s", exc.error.message)
            return
