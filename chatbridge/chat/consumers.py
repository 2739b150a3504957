"""``ChatConsumer``: one per WebSocket, a view onto one conversation. Transport only."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, assert_never
from urllib.parse import parse_qs

from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.utils import await_many_dispatch
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from pydantic import ValidationError

from chatbridge.asgi_types import Scope
from chatbridge.author.exceptions import ChatBridgeError, RefusalCode, format_errors
from chatbridge.chat.coalesce import coalesce
from chatbridge.chat.disconnects import client_gone
from chatbridge.chat.languages import socket_language
from chatbridge.chat.limits import MAX_MESSAGE_BYTES, nul_refused, take_each, too_long_refused
from chatbridge.chat.rendering import SocketView, render_event
from chatbridge.chat.socket_caps import SOCKETS, Seat
from chatbridge.chat.socket_owner import socket_owner
from chatbridge.cluster.broadcast import attach, detach
from chatbridge.engine.engine import CommandRefused
from chatbridge.engine.protocol import (
    Abort,
    Approve,
    ChatEvent,
    Command,
    Deny,
    EditMessage,
    ElicitResponseCommand,
    ErrorEvent,
    NotStrictJson,
    Regenerate,
    Stop,
    UserMessage,
    UserMessageCommand,
    decode_frame,
    parse_command,
)
from chatbridge.forwarded import client_network
from chatbridge.records.outage import DatabaseUnavailable
from chatbridge.runtime import ChatBridgeRuntime, RuntimeNotRunning, current_runtime

__all__ = [
    "CLOSE_FORBIDDEN",
    "CLOSE_RATE_LIMITED",
    "CLOSE_TOO_LARGE",
    "CLOSE_TOO_MANY",
    "MAX_MESSAGE_BYTES",
    "ChatConsumer",
]

logger = logging.getLogger("chatbridge.chat")

MAX_STRIKES = 200  # commands over the rate limit before the socket is closed
MAX_OUTBOX = 1000  # events waiting for a client that does not read before its socket closes
# The application's own close codes. RFC 6455 leaves 4000-4999 to applications; a server may
# refuse a protocol code such as 1009 from the application (daphne does, and the client then
# sees 1011). 4403 and 4429 echo HTTP's 403 and 429; 4009 echoes 1009, "message too big".
CLOSE_FORBIDDEN = 4403
CLOSE_TOO_LARGE = 4009
CLOSE_RATE_LIMITED = 4429
CLOSE_TOO_MANY = 4429  # the visitor's or the address's sockets are at their cap
CLOSE_TOO_SLOW = 4408  # the client did not read its events
CLOSE_TRY_AGAIN = 1013  # "try again later": the database is away (the page reconnects)
UNAVAILABLE = gettext_noop(
    "The database is unavailable right now, so that was not done; please send it again in a moment."
)
_FORM_FIELDS = {"command", "session_id", "call_id", "elicit_id", "action", "change", "HEADERS"}


def command_from_form(data: dict[str, Any]) -> dict[str, Any]:
    """Turn an htmx ``ws-send`` form (fields + HEADERS) into a protocol command."""
    kind = data.get("command")
    if kind == "elicit_response":
        ids: dict[str, Any] = {
            k: data[k] for k in ("session_id", "call_id", "elicit_id") if k in data
        }
        if data.get("change"):  # a Change button: no answer, a question asked again
            return {"type": kind, **ids, "change": data["change"]}
        return {
            "type": kind,
            **ids,
            "action": data.get("action") or "accept",
            "content": {k: v for k, v in data.items() if k not in _FORM_FIELDS},
        }
    return {"type": kind, **{k: v for k, v in data.items() if k not in ("command", "HEADERS")}}


def _page_origin(scope: Scope) -> str:
    """The chat page's origin: the socket's Origin header (checked to be this site's by
    ``SameOriginValidator``), else its Host; links of URL questions point there."""
    headers: dict[bytes, bytes] = dict(scope.get("headers") or [])
    origin = headers.get(b"origin", b"").decode("latin-1")
    if origin and origin != "null":
        return origin
    host = headers.get(b"host", b"").decode("latin-1")
    scheme = "https" if scope.get("scheme") == "wss" else "http"
    return f"{scheme}://{host}" if host else ""


def _retitled(conversation_id: str, title: str) -> str:
    """The conversation's sidebar link and the page's heading (and so its tab title), named
    after its first message."""
    item = {"id": conversation_id, "title": title}
    link = render_to_string(
        "chatbridge/conversation_link.html", {"item": item, "conversation": item, "oob": True}
    )
    return link + render_to_string("chatbridge/chat_title.html", {"title": title, "oob": True})


class ChatConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """Forwards commands to the hub and renders the conversation's events for this socket.

    A socket has no channel of its own in the channel layer: events of this process reach
    ``deliver``, and those of other workers reach this worker's listener, which hands them to
    ``deliver`` too (``chatbridge.cluster.broadcast``)."""

    conversation_id: str
    json_mode: bool
    # Set once the socket is closed, by this consumer or by its client. The consumer still gets
    # the conversation's events until the server's disconnect reaches it; they are dropped.
    closed = False

    # The runtime the socket was admitted on (its owner checked): frames go to its hub.
    runtime: ChatBridgeRuntime | None = None
    _sender: asyncio.Task[None] | None = None
    lagging = False  # fell MAX_OUTBOX events behind: being closed

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Channels' ``AsyncConsumer.__call__`` without a channel in the channel layer: the
        client's frames are the one source."""
        self.scope = scope
        self.channel_layer = None
        self.base_send = send
        # This connection's task, its outbox and the turns it starts speak the page's language.
        translation.activate(socket_language(scope.get("headers") or ()))
        with contextlib.suppress(StopConsumer):
            await await_many_dispatch([receive], self.dispatch)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels checks database connections before every handler, in a thread hop; frames
        touch no database here, so only connects and disconnects pay for it."""
        if message["type"] == "websocket.receive":
            await self.websocket_receive(message)
        else:
            await super().dispatch(message)

    async def connect(self) -> None:
        self.conversation_id = str(self.scope["url_route"]["kwargs"]["conversation_id"])
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.json_mode = query.get("format") == ["json"]
        self.view = SocketView()
        self.strikes = 0
        client = self.scope.get("client")  # the real one behind a trusted proxy (forwarded)
        self.seat: Seat = SOCKETS.seat(client_network(str(client[0]) if client else ""))
        if (too_many := self.seat.enter_network()) is not None:  # before any database read
            await self._refuse_socket(too_many)
            return
        try:
            owner, seen = await socket_owner(self.scope, self.conversation_id)
        except DatabaseUnavailable:  # the page connects again (its reconnect backs off)
            logger.warning(
                "socket for conversation %s: the database is unavailable", self.conversation_id
            )
            self.seat.leave()
            await self.close(code=CLOSE_TRY_AGAIN)
            return
        if seen is None or owner is None:
            logger.warning(
                "refused socket for conversation %s (owner %s)", self.conversation_id, owner
            )
            self.seat.leave()
            await self.close(code=CLOSE_FORBIDDEN)
            return
        if (too_many := self.seat.enter_visitor(owner)) is not None:
            await self._refuse_socket(too_many)
            return
        # Events come to ``deliver``; they wait in the outbox until the state and the open
        # forms below are sent. The other workers learn that this one shows the conversation
        # before it asks the worker running its turn, if another, to show it (``recover``).
        self.outbox: asyncio.Queue[ChatEvent] = asyncio.Queue()
        attach(self.conversation_id, self)
        try:
            self.runtime = runtime = current_runtime()
            await runtime.broadcast.announce(self.conversation_id)
            await self.accept()
            hub = runtime.hub
            hub.page_at(self.conversation_id, _page_origin(self.scope))
            await self.send_event(hub.state(self.conversation_id))
            for form in hub.pending_forms(self.conversation_id):
                await self.send_event(form)
            self._sender = asyncio.create_task(self._send_outbox(), name="chatbridge-socket-outbox")
            # Calls suspended in a process that is gone come back by replay (forms follow).
            try:
                await hub.recover(self.conversation_id, seen)
            except DatabaseUnavailable as exc:  # the next socket or answer recovers them
                logger.warning("conversation %s not recovered: %s", self.conversation_id, exc)
        except BaseException:  # a socket that failed to start leaves nothing behind
            with contextlib.suppress(Exception):
                await self.disconnect(1011)
            raise

    async def _refuse_socket(self, words: str) -> None:
        """Too many sockets: said in words (the page shows them; a refused handshake would
        only read as a network error), then closed. Nothing more is read or held."""
        logger.warning(
            "refused socket for conversation %s from %s: %s",
            self.conversation_id,
            self.seat.network or "an unknown address",
            words,
        )
        self.seat.leave()
        await self.accept()
        await self.refuse("TOO_MANY_SOCKETS", words)
        await self.close(code=CLOSE_TOO_MANY)

    async def disconnect(self, code: int) -> None:
        self.closed = True
        if hasattr(self, "seat"):
            self.seat.leave()
        if self._sender is not None:  # and forget it: its cancellation would keep us alive
            self._sender.cancel()
            self._sender = None
        if hasattr(self, "outbox"):  # it was attached
            detach(self.conversation_id, self)
            # Said on the runtime running now; with none (the server stopped), nobody listens.
            with contextlib.suppress(RuntimeNotRunning):
                await current_runtime().broadcast.announce(self.conversation_id)

    async def rejoined(self) -> None:
        """The channel layer is back after an outage: the conversation's state again, and
        the worker running its turn, if another, shows its open questions again (events it
        published meanwhile were lost)."""
        if self.runtime is None:
            return
        hub = self.runtime.hub
        self.deliver(hub.state(self.conversation_id))  # in order with the events queued
        await hub.recover(self.conversation_id)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        raw = text_data if text_data is not None else (bytes_data or b"").decode("utf-8", "replace")
        if len(raw.encode("utf-8")) > MAX_MESSAGE_BYTES:  # a server started without the limit
            words = _("Messages are limited to %(size)s KiB.") % {"size": MAX_MESSAGE_BYTES // 1024}
            await self.refuse("TOO_LARGE", words)
            await self.close(code=CLOSE_TOO_LARGE, reason=words)
            return
        if not take_each(self.seat.buckets):  # the visitor's rate, and the address's
            self.strikes += 1
            if self.strikes > MAX_STRIKES:
                await self.refuse(
                    "RATE_LIMITED", _("Too many messages; this connection is closed.")
                )
                await self.close(code=CLOSE_RATE_LIMITED)
            elif self.strikes == 1 or self.strikes % 20 == 0:
                await self.refuse("RATE_LIMITED", _("Too many messages; slow down."))
            return
        try:  # NaN, 1e999 and lone surrogates are refused here, before anything keeps them
            data = decode_frame(raw)
        except NotStrictJson as exc:
            await self.refuse("BAD_JSON", f"That message was not valid JSON: {exc}")
            return
        if not isinstance(data, dict):
            await self.refuse("BAD_COMMAND", "A command must be a JSON object.")
            return
        if "type" not in data and "command" in data:
            data = command_from_form(data)
        if (with_nul := nul_refused(data)) is not None:
            await self.refuse("BAD_TEXT", with_nul)
            return
        if (too_long := too_long_refused(data)) is not None:
            await self.refuse("TOO_LONG", too_long)
            return
        try:
            command = parse_command(data)
        except ValidationError as exc:
            kind = data.get("type")
            errors = [  # drop the union's tag from each location
                {**e, "loc": e["loc"][1:]} if e["loc"][:1] == (kind,) else e
                for e in exc.errors(include_url=False)
            ]
            detail = format_errors(errors)
            await self.refuse("BAD_COMMAND", f"Invalid {kind!r} command: {detail}")
            return
        try:
            await self.dispatch_command(command)
        except CommandRefused as exc:
            if exc.code == "NOT_FOUND":
                logger.warning("conversation %s: %s", self.conversation_id, exc)
            await self.refuse(exc.code, str(exc))
        except ChatBridgeError as exc:
            await self.refuse("REFUSED", str(exc))
        except DatabaseUnavailable as exc:  # waited for it in vain: nothing was done
            logger.warning(
                "command %s in conversation %s: %s", command.type, self.conversation_id, exc
            )
            await self.refuse("UNAVAILABLE", _(UNAVAILABLE))
        except Exception:  # never let a command take the socket down
            logger.exception(
                "command %s failed in conversation %s", command.type, self.conversation_id
            )
            await self.refuse("INTERNAL_ERROR", "That did not work because of a server error.")

    async def dispatch_command(self, command: Command) -> None:
        if self.runtime is None:  # a socket refused at its start reads nothing
            raise CommandRefused("NOT_FOUND", "This connection was not admitted.")
        hub = self.runtime.hub
        conversation = self.conversation_id
        match command:
            case UserMessageCommand():
                await hub.user_message(
                    conversation,
                    command.text.strip() or command.text,
                    client_id=command.client_id,
                    queue=command.queue,
                    address=self.seat.network,
                )
            case ElicitResponseCommand():
                await hub.elicit_response(conversation, command)
            case Abort():
                await hub.abort(conversation, command.session_id, command.reason)
            case Approve():
                await hub.decide(conversation, command.call_id, True)
            case Deny():
                await hub.decide(conversation, command.call_id, False, command.reason)
            case Stop():
                await hub.stop(conversation)
            case EditMessage():
                text = command.text.strip() or command.text
                await hub.edit_message(
                    conversation, command.message_id, text, address=self.seat.network
                )
            case Regenerate():
                await hub.regenerate(conversation, command.message_id, address=self.seat.network)
            case _:
                assert_never(command)

    async def refuse(self, code: RefusalCode, message: str) -> None:
        await self.send_event(ErrorEvent(code=code, message=message))

    def deliver(self, event: ChatEvent) -> None:
        """An event of the conversation, published in this process or handed over by this
        worker's listener: sent in order by the socket's outbox task. A client that stops
        reading is closed, not waited for."""
        if self.closed or self.lagging:
            return
        if self.outbox.qsize() >= MAX_OUTBOX:
            logger.warning(
                "conversation %s: a socket fell %d events behind; closed",
                self.conversation_id,
                MAX_OUTBOX,
            )
            self.lagging = True  # nothing more is queued; it reconnects and gets the state
            asyncio.get_running_loop().create_task(self.close(code=CLOSE_TOO_SLOW))
            return
        self.outbox.put_nowait(event)

    async def _send_outbox(self) -> None:
        while True:
            batch = [await self.outbox.get()]
            while not self.outbox.empty():  # behind: what is queued goes coalesced
                batch.append(self.outbox.get_nowait())
            for event in coalesce(batch):
                try:
                    await self.send_event(event)
                except Exception:  # one event that cannot be sent does not end the socket
                    logger.exception("event %s not sent to a socket", event.type)

    async def send_event(self, event: ChatEvent) -> None:
        if self.closed:
            logger.debug("socket closed; %s event dropped", event.type)
            return
        if self.json_mode:
            await self.send(text_data=event.model_dump_json())
            return
        html = render_event(event, self.view)
        if isinstance(event, UserMessage) and html and event.title is not None:
            html += _retitled(self.conversation_id, event.title)
        if html:
            await self.send(text_data=html)

    async def send(
        self, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False
    ) -> None:
        """Send a frame; a client that is gone is not an error (the frame is dropped)."""
        if self.closed:
            return
        try:
            await super().send(text_data=text_data, bytes_data=bytes_data, close=close)
        except Exception as exc:
            if not client_gone(exc):
                raise
            self._went_away(exc)

    async def close(self, code: int | None = None, reason: str | None = None) -> None:
        """Close the socket; nothing is sent on it afterwards (servers refuse it)."""
        if self.closed:
            return
        self.closed = True
        try:
            await super().close(code=code, reason=reason)
        except Exception as exc:
            if not client_gone(exc):
                raise
            self._went_away(exc)

    def _went_away(self, exc: Exception) -> None:
        self.closed = True
        logger.debug(
            "socket of conversation %s is gone: %s: %s",
            getattr(self, "conversation_id", "?"),
            type(exc).__name__,
            exc,
        )
