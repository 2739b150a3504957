"""What travels between two workers for a relayed legacy MCP request (``session_relay``): the
session ids that name their holder, the holder's answer piece by piece, and the channel each
side listens on.

Messages are dumped in Python mode (bodies stay bytes: channels_redis packs them with msgpack)
and parsed once where they arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Annotated, Any, Literal, TypeAlias

from mcp.server.streamable_http import check_accept_headers
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import JSONRPCRequest, jsonrpc_message_adapter
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.requests import Request

from chatbridge.asgi_types import Message, Receive, Scope, Send
from chatbridge.cluster.layer_health import note_trouble
from chatbridge.cluster.messages import RelayRequest
from chatbridge.cluster.reply_channels import forget
from chatbridge.mcp.callers import Caller, enter

__all__ = [
    "CHUNK",
    "Accepted",
    "Body",
    "Cancel",
    "End",
    "Gone",
    "Inbox",
    "Link",
    "NotHeld",
    "Outbox",
    "Parts",
    "Relayed",
    "Start",
    "answer_accepted",
    "answer",
    "client_gone",
    "holder_tag",
    "one_way",
    "pieces",
    "read_body",
    "replaying",
    "scope_of",
    "send_to",
    "worker_tag",
]

logger = logging.getLogger("chatbridge.mcp")

CHUNK = 256 * 1024  # a response body travels in pieces of at most this many bytes
BACKLOG = 4 * CHUNK  # the holder's app waits while this much of its answer waits to travel
# Seconds a piece of the answer waits for the next before it travels (unless it is the last):
# a response's start and its body, an event and the end of its stream, go in one message. An
# answer complete sooner travels at once. A holder descheduled past it sends the rest apart.
LINGER = 0.005
# Seconds a relayed request rides out its channel layer failing (Redis restarting): what is to
# travel waits and is sent when it is back; a layer away longer ends the request.
PATIENCE = 30.0
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 1.0
_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")
_TAGGED = re.compile(r"[0-9a-f]{32}\.([a-zA-Z0-9_.-]{1,80})")


def worker_tag(worker: str) -> str:
    """``worker``'s name in the session ids it gives out: visible ASCII that names its group
    (``worker_group(worker_tag(w)) == worker_group(w)``)."""
    return _UNSAFE.sub("-", worker)[:80]


def holder_tag(session_id: str) -> str | None:
    """The tag of the worker that gave out ``session_id``; None for an untagged id."""
    tagged = _TAGGED.fullmatch(session_id)
    return tagged.group(1) if tagged else None


# -- what the holder sends back, and a cancel sent to it ----------------------------------


class _Relayed(BaseModel):
    model_config = ConfigDict(frozen=True)


class Accepted(_Relayed):
    """The holder serves the request; ``holder_link`` on its inbox ``channel`` reaches it
    there (to cancel it)."""

    type: Literal["relay.accepted"] = "relay.accepted"
    worker: str
    channel: str
    holder_link: str


class NotHeld(_Relayed):
    """The session is not (or no longer) held there."""

    type: Literal["relay.not_held"] = "relay.not_held"


class Start(_Relayed):
    type: Literal["relay.start"] = "relay.start"
    status: int
    headers: list[tuple[bytes, bytes]]


class Body(_Relayed):
    type: Literal["relay.body"] = "relay.body"
    body: bytes = b""
    more_body: bool = False


class End(_Relayed):
    """The request is over on the holder (its last word)."""

    type: Literal["relay.end"] = "relay.end"


class Cancel(_Relayed):
    """The client went away: end the request."""

    type: Literal["relay.cancel"] = "relay.cancel"


Part: TypeAlias = Annotated[Start | Body | End, Field(discriminator="type")]


class Parts(_Relayed):
    """Pieces of the answer, in order: those the app sent while the last message travelled."""

    type: Literal["relay.parts"] = "relay.parts"
    parts: list[Part]


Relayed: TypeAlias = Annotated[
    Accepted | NotHeld | Start | Body | End | Cancel | Parts, Field(discriminator="type")
]
_RELAYED: TypeAdapter[Relayed] = TypeAdapter(Relayed)
Gone = Literal["client", "peer", "closing"]  # the other events a relayed request waits on


class Inbox:
    """This process's one channel for relayed requests (both sides: the answers to requests
    it relayed, the cancels of requests it serves), subscribed once: each request has a link
    on it, named in what is sent to it (``link``), rather than a channel of its own (two
    commands a request saved, on each side). The layer failing (Redis restarting) is waited
    out, and its subscription is back when the layer is; past ``PATIENCE`` the requests
    waiting on it end."""

    def __init__(self, layer: Any) -> None:
        self.layer, self.channel = layer, ""
        self._links: dict[str, asyncio.Queue[Relayed | Gone]] = {}
        self._task: asyncio.Task[None] | None = None

    async def link(self) -> Link:
        """A new link on this inbox (its channel made on the first)."""
        if not self.channel:
            self.channel = await self.layer.new_channel()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._receive(), name="chatbridge-relay-inbox")
        link = Link(self, uuid.uuid4().hex)
        self._links[link.id] = link.queue
        return link

    def drop(self, link: Link) -> None:
        self._links.pop(link.id, None)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
        for queue in self._links.values():
            queue.put_nowait("closing")
        self._links.clear()
        if self.channel:
            with contextlib.suppress(Exception):
                await forget(self.layer, self.channel)

    async def _receive(self) -> None:
        """Take what arrives, in order, to the link it names."""
        failing: _Failing | None = None
        while True:
            try:
                raw = await self.layer.receive(self.channel)
            except Exception as exc:
                failing = failing or _Failing(f"reading relay channel {self.channel}", exc)
                if not await failing.wait():
                    for waiting in self._links.values():
                        waiting.put_nowait("closing")  # gone too long: those requests end
                    failing = None
                continue
            failing = None
            queue = self._links.get(str(raw.get("link") or "")) if isinstance(raw, dict) else None
            if queue is None:
                continue  # its request ended here meanwhile: nobody waits for it
            try:
                message = _RELAYED.validate_python(raw)
            except ValidationError as exc:
                logger.error("malformed relayed MCP message dropped: %s", exc)
                continue
            for item in message.parts if isinstance(message, Parts) else [message]:
                queue.put_nowait(item)


class Link:
    """One relayed request's place on this process's ``Inbox``: what arrives for it, in order,
    in one queue with the other events it waits on (its client leaving, its peer dying)."""

    def __init__(self, inbox: Inbox, link_id: str) -> None:
        self.inbox, self.id = inbox, link_id
        self.queue: asyncio.Queue[Relayed | Gone] = asyncio.Queue()
        self._tasks: list[asyncio.Future[Any]] = []

    @property
    def layer(self) -> Any:
        return self.inbox.layer

    @property
    def channel(self) -> str:
        return self.inbox.channel

    def on(self, event: Awaitable[Any], what: Gone) -> None:
        """Queue ``what`` once ``event`` happens (a link closed first never waits for it)."""

        def happened(waited: asyncio.Future[Any]) -> None:
            if not waited.cancelled() and waited.exception() is None:
                self.queue.put_nowait(what)

        waiting = asyncio.ensure_future(event)
        waiting.add_done_callback(happened)
        self._tasks.append(waiting)

    async def next(self, timeout: float | None = None) -> Relayed | Gone | None:
        """The next message or event; None after ``timeout`` seconds without one."""
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None

    async def close(self) -> None:
        self.inbox.drop(self)
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)


async def send_to(layer: Any, channel: str, link: str, message: _Relayed) -> None:
    """Send ``message`` to ``link`` on the inbox ``channel`` (of the other worker)."""
    await layer.send(channel, {**message.model_dump(), "link": link})


class Outbox:
    """The answer on its way back: the app never waits for Redis (unless ``BACKLOG`` bytes
    wait), and what it sends within ``LINGER`` or while one message travels goes in the next,
    so a short answer costs one message, not one per ASGI message."""

    def __init__(self, deliver: Callable[[Parts], Awaitable[None]]) -> None:
        self.deliver = deliver
        self.failed: Exception | None = None
        self._parts: list[Start | Body | End] = []
        self._last: Start | Body | End | None = None  # the last part put
        self._wake, self._room, self._ended = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._room.set()
        self._task: asyncio.Task[None] | None = None

    async def put(self, parts: Iterable[Start | Body | End]) -> None:
        for part in parts:
            self._parts.append(part)
            self._last = part
            if _final(part):
                self._ended.set()
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run())
        if self._waiting() > BACKLOG:
            self._room.clear()
            await self._room.wait()

    async def close(self) -> None:
        """Send the ``End`` after what waits, unless the response was complete (its last body
        says it is over); return once sent (or sending failed)."""
        if self.failed is None and not self._complete():
            await self.put([End()])
        if self._task is not None:
            await asyncio.wait({self._task})

    def _complete(self) -> bool:
        return self._last is not None and _final(self._last)

    def _waiting(self) -> int:
        return sum(len(p.body) for p in self._parts if isinstance(p, Body))

    async def _run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                if self._parts and not _final(self._parts[-1]):
                    # what the app sends next goes along; a complete answer goes at once
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._ended.wait(), LINGER)
                while self._parts:
                    size, count = 0, 0
                    for part in self._parts:
                        size += len(part.body) if isinstance(part, Body) else 0
                        count += 1
                        if size >= CHUNK:
                            break
                    batch, self._parts = self._parts[:count], self._parts[count:]
                    await self._send(Parts(parts=batch))
                    if self._waiting() <= BACKLOG:
                        self._room.set()
                    if _final(batch[-1]):
                        return
        except Exception as exc:  # the channel layer is down past PATIENCE
            self.failed = exc
            self._room.set()

    async def _send(self, batch: Parts) -> None:
        """Deliver ``batch``; a layer failing (Redis restarting) is waited out, the batch sent
        again once it is back; past ``PATIENCE`` its error is raised."""
        failing: _Failing | None = None
        while True:
            try:
                await self.deliver(batch)
                return
            except Exception as exc:
                failing = failing or _Failing("relaying an answer back", exc)
                if not await failing.wait():
                    raise


def _final(part: Start | Body | End) -> bool:
    """Is nothing more to travel after ``part`` (the request's end, or its response's)?"""
    return isinstance(part, End) or (isinstance(part, Body) and not part.more_body)


class _Failing:
    """The channel layer failing for a relayed request: backing off, and for how long."""

    def __init__(self, what: str, first: Exception) -> None:
        note_trouble()
        self.what, self.delay = what, BACKOFF_FIRST
        self.since = asyncio.get_running_loop().time()
        logger.warning("%s failed (%r): waiting up to %.0f s for it", what, first, PATIENCE)

    async def wait(self) -> bool:
        """Back off before the next try; False once ``PATIENCE`` has passed."""
        note_trouble()
        if asyncio.get_running_loop().time() - self.since >= PATIENCE:
            logger.warning("%s: the channel layer stayed away; giving up", self.what)
            return False
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, BACKOFF_MAX)
        return True


async def read_body(receive: Receive, cap: int) -> bytes | None:
    """The request's body; None past ``cap`` bytes."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(body)
        body += message.get("body", b"")
        if len(body) > cap:
            return None
        if not message.get("more_body", False):
            return bytes(body)


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` again, the body it gave already given first."""
    given = False

    async def again() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def client_gone(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def pieces(message: Message) -> Iterator[Start | Body]:
    """An ASGI response message as it travels (a large body in pieces)."""
    if message["type"] == "http.response.start":
        headers = [(bytes(k), bytes(v)) for k, v in message.get("headers") or ()]
        yield Start(status=message["status"], headers=headers)
    elif message["type"] == "http.response.body":
        body, more = bytes(message.get("body", b"")), bool(message.get("more_body", False))
        for at in range(0, max(len(body), 1), CHUNK):
            yield Body(body=body[at : at + CHUNK], more_body=more or at + CHUNK < len(body))


def one_way(scope: Scope, body: bytes, *, json_only: bool) -> bool:
    """Is this a request the SDK answers 202 with no body, from its headers and body alone:
    a POST of a JSON-RPC notification or response (no request) that its transport accepts?
    Such a request is handed to the holder one way and answered here (``answer_accepted``); what
    only the holder can check (the session is still there, and the caller's) it checks
    then, and a message it refuses is logged there."""
    if scope.get("method") != "POST":
        return False
    request = Request(scope)
    has_json, has_sse = check_accept_headers(request)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not has_json or not (has_sse or json_only) or kind != "application/json":
        return False
    version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return False  # another era's request: the holder's SDK routes it
    try:
        message = jsonrpc_message_adapter.validate_json(body)
    except ValueError:  # pydantic's ValidationError among them: the SDK's 400, from there
        return False
    return not isinstance(message, JSONRPCRequest)


async def answer_accepted(send: Send, session: str) -> None:
    """The SDK's answer to a notification or a response: 202, no body."""
    headers = [
        (b"content-type", b"application/json"),
        (b"mcp-session-id", session.encode("latin-1")),
        (b"content-length", b"0"),
    ]
    await send({"type": "http.response.start", "status": 202, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def answer(send: Send, status: int, body: bytes, kind: bytes = b"text/plain") -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", kind)]}
    )
    await send({"type": "http.response.body", "body": body})


def scope_of(request: RelayRequest) -> Scope:
    """The relayed request as the holder's ASGI app receives it, its caller entered."""
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": request.http_version,
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "root_path": "",
        "query_string": request.query_string.encode("latin-1"),
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in request.headers],
        "client": request.client,
        "server": None,
        "state": {},
    }
    meta = {str(k): str(v) for k, v in dict(request.caller.get("meta") or {}).items()}
    identity, quota = str(request.caller["identity"]), str(request.caller["quota"])
    enter(scope, Caller(identity, quota, meta))
    return scope
