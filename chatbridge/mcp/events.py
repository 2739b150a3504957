"""Resumable MCP event streams (SEP-1699): the SDK's ``EventStore``, one scope per MCP session.

With an event store the SDK's transport opens every SSE stream of a 2025-11-25 client with a
priming event (an id, empty data, ``retry``) and keeps each message it sends, so a client whose
stream was cut reconnects with ``GET`` + ``Last-Event-ID`` and gets what it missed.

The SDK names a stream by the JSON-RPC id of the request it answers (or ``_GET_stream``), which
every session reuses: one store shared by all sessions would replay another session's events.
So each session gets its own ``SessionEvents`` over a shared ``EventLog``, and an event id names
its session, its position and its stream (``<session>:<seq>:<stream>``): a replay serves only
the events of the session that asks. The log is in memory for one worker, or Redis (a list per
stream, with a TTL and count/size caps) so any worker can replay a session's events.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import (
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
    StreamId,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import JSONRPCMessage, jsonrpc_message_adapter

__all__ = [
    "EventLog",
    "EventRef",
    "MemoryEventLog",
    "RedisEventLog",
    "ResumableSessions",
    "SessionEvents",
    "parse_event_id",
]

logger = logging.getLogger("chatbridge.mcp")

MAX_EVENTS = 500  # per stream: a call's questions, pings, progress and result fit many times
MAX_BYTES = 4 * 1024 * 1024  # per stream; the newest event is kept even if larger on its own
TTL = 600.0  # seconds a stream is kept after its last event
MAX_STREAMS = 20_000  # in memory: the oldest streams go first beyond this


class EventLog(Protocol):
    """Append-only streams of serialised messages, each event numbered from 1 in its stream."""

    async def append(self, stream: str, data: str) -> int:
        """Store ``data`` ("" for a priming event) and return its number."""
        ...

    async def after(self, stream: str, seq: int) -> list[tuple[int, str]] | None:
        """The events kept after number ``seq``, oldest first; None for an unknown stream."""
        ...

    async def aclose(self) -> None: ...


@dataclass
class _Stream:
    seq: int = 0
    size: int = 0
    events: deque[tuple[int, str]] = field(default_factory=deque)


class MemoryEventLog:
    """One worker's streams, bounded by count, size, age and number of streams."""

    def __init__(
        self,
        *,
        max_events: int = MAX_EVENTS,
        max_bytes: int = MAX_BYTES,
        ttl: float = TTL,
        max_streams: int = MAX_STREAMS,
    ) -> None:
        self.max_events, self.max_bytes, self.ttl = max_events, max_bytes, ttl
        self.max_streams = max_streams
        self._streams: OrderedDict[str, tuple[float, _Stream]] = OrderedDict()  # by last write

    def _expire(self, now: float) -> None:
        while self._streams:
            key, (written, _) = next(iter(self._streams.items()))
            if now - written < self.ttl and len(self._streams) <= self.max_streams:
                return
            del self._streams[key]

    async def append(self, stream: str, data: str) -> int:
        now = time.monotonic()
        _, kept = self._streams.pop(stream, (now, _Stream()))
        kept.seq += 1
        kept.events.append((kept.seq, data))
        kept.size += len(data)
        while len(kept.events) > 1 and (
            len(kept.events) > self.max_events or kept.size > self.max_bytes
        ):
            kept.size -= len(kept.events.popleft()[1])
        self._streams[stream] = (now, kept)
        self._expire(now)
        return kept.seq

    async def after(self, stream: str, seq: int) -> list[tuple[int, str]] | None:
        found = self._streams.get(stream)
        if found is None or time.monotonic() - found[0] >= self.ttl:
            return None
        return [(n, data) for n, data in found[1].events if n > seq]

    @property
    def streams(self) -> int:
        return len(self._streams)

    async def aclose(self) -> None:
        self._streams.clear()


@dataclass
class _Written:
    """What the worker writing a stream knows of it: the next number, the sizes kept, and when
    its TTL was last pushed on (monotonic)."""

    seq: int = 0
    size: int = 0
    sizes: deque[int] = field(default_factory=deque)
    refreshed: float = float("-inf")


class RedisEventLog:
    """Streams in Redis, shared by every worker: a list per stream (each item ``<seq>\n<data>``),
    with a TTL.

    A stream has one writer, the worker holding its session: that worker numbers its events
    and keeps their sizes, so an append is one RPUSH in the common case (an LTRIM past a cap, a
    PEXPIRE when the stream starts and every quarter of the TTL after: one round trip). A
    stream the writer has not pushed on for a TTL is gone from Redis too: it starts again."""

    def __init__(
        self,
        url: str,
        prefix: str = "chatbridge:mcp-events",
        *,
        max_events: int = MAX_EVENTS,
        max_bytes: int = MAX_BYTES,
        ttl: float = TTL,
        max_streams: int = MAX_STREAMS,
    ) -> None:
        from redis.asyncio import Redis

        self.redis: Redis = Redis.from_url(url, decode_responses=True)
        self.prefix = prefix
        self.max_events, self.max_bytes, self.ttl = max_events, max_bytes, ttl
        self.max_streams = max_streams
        self._written: OrderedDict[str, _Written] = OrderedDict()  # by last write

    def _key(self, stream: str) -> str:
        return f"{self.prefix}:{{{stream}}}:events"  # braces: its own slot (Redis Cluster)

    async def append(self, stream: str, data: str) -> int:
        now = time.monotonic()
        key, pipe = self._key(stream), self.redis.pipeline(transaction=False)
        kept = self._written.pop(stream, None)
        if kept is not None and now - kept.refreshed >= self.ttl:
            pipe.unlink(key)  # expired (or about to): what this worker knew of it is stale
            kept = None
        kept = kept or _Written()
        self._written[stream] = kept
        while len(self._written) > self.max_streams:  # the oldest streams go first
            pipe.unlink(self._key(self._written.popitem(last=False)[0]))
        kept.seq += 1
        kept.sizes.append(len(data))
        kept.size += len(data)
        trimmed = False
        while len(kept.sizes) > 1 and (
            len(kept.sizes) > self.max_events or kept.size > self.max_bytes
        ):
            kept.size -= kept.sizes.popleft()
            trimmed = True
        pipe.rpush(key, f"{kept.seq}\n{data}")
        if trimmed:
            pipe.ltrim(key, -len(kept.sizes), -1)
        refresh = now - kept.refreshed >= self.ttl / 4
        if refresh:
            pipe.pexpire(key, int(self.ttl * 1000))
        try:
            await pipe.execute()
        except Exception:
            kept.refreshed = float("-inf")  # its TTL is pushed on with the next event
            raise
        if refresh:
            kept.refreshed = now
        return kept.seq

    async def after(self, stream: str, seq: int) -> list[tuple[int, str]] | None:
        found = await self.redis.lrange(self._key(stream), 0, -1)
        items = [i.decode() if isinstance(i, bytes) else i for i in found]
        if not items:
            return None
        events = []
        for item in items:
            numbers, _, data = item.partition("\n")
            number = int(numbers.partition(" ")[0])  # "<seq> <size>" in lists of before
            if number > seq:
                events.append((number, data))
        return events

    async def aclose(self) -> None:
        await self.redis.aclose()


@dataclass(frozen=True)
class EventRef:
    session: str
    seq: int
    stream: StreamId


def parse_event_id(event_id: str) -> EventRef | None:
    """``<session>:<seq>:<stream>``, or None for an id this server did not make."""
    session, _, rest = event_id.partition(":")
    number, _, stream = rest.partition(":")
    if not session or not stream or not number.isdigit():
        return None
    return EventRef(session, int(number), stream)


class SessionEvents(EventStore):
    """The events of one MCP session, on a log other sessions (and workers) share."""

    def __init__(self, log: EventLog, session: str) -> None:
        self.log, self.session = log, session

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        if message is None:  # a priming event: nothing to keep, what follows it is the stream
            return f"{self.session}:0:{stream_id}"
        data = message.model_dump_json(by_alias=True, exclude_unset=True)
        try:
            seq = await self.log.append(f"{self.session}:{stream_id}", data)
        except Exception as exc:  # the SDK's message router dies on an error: never raise
            logger.warning("MCP event of %s not kept, it cannot be replayed: %r", stream_id, exc)
            seq = 0
        return f"{self.session}:{seq}:{stream_id}"

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        ref = parse_event_id(last_event_id)
        if ref is None or ref.session != self.session:
            return None  # not this session's: nothing to replay
        try:
            events = await self.log.after(f"{self.session}:{ref.stream}", ref.seq)
        except Exception as exc:
            logger.warning("MCP events after %s could not be read: %r", last_event_id, exc)
            return None
        if events is None:
            if ref.seq:
                return None  # an event of a stream not kept (expired, or never made)
            events = []  # after a priming event: the stream has no message yet
        for seq, data in events:
            if data:  # priming events carry no message
                message = jsonrpc_message_adapter.validate_json(data)
                await send_callback(EventMessage(message, f"{self.session}:{seq}:{ref.stream}"))
        return ref.stream


class ResumableSessions(StreamableHTTPSessionManager):
    """The SDK's session manager, giving each session its own ``SessionEvents`` on ``log``.

    With a ``tag`` (this worker's, ``mcp/session_relay.py``) a session's id names the worker
    holding it, ``<hex>.<tag>``: another worker that receives a request for it knows where to
    relay it."""

    def __init__(self, app: Any, log: EventLog, *, tag: str = "", **options: Any) -> None:
        # The shared store only switches resumability on; every session gets its own scope.
        super().__init__(app, event_store=SessionEvents(log, ""), **options)
        self.log, self.tag = log, tag

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        transport = super()._admit_session(requestor)
        if transport is None or transport.mcp_session_id is None:
            return transport
        if self.tag:  # re-keyed before any await: nothing has seen the SDK's id yet
            plain = transport.mcp_session_id
            transport.mcp_session_id = session_id = f"{plain}.{self.tag}"
            self._server_instances[session_id] = self._server_instances.pop(plain)
            if plain in self._session_owners:
                self._session_owners[session_id] = self._session_owners.pop(plain)
        transport._event_store = SessionEvents(self.log, transport.mcp_session_id)
        return transport

    def holds(self, session_id: str) -> bool:
        """Whether this worker serves the MCP session ``session_id``."""
        return session_id in self._server_instances
