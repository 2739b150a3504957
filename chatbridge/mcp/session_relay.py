"""Legacy MCP sessions on any worker: a request for a session another worker holds is served
by that worker, relayed through the channel layer (issue 27), so a balancer needs no affinity.

The SDK keeps a legacy session (streamable HTTP with ``Mcp-Session-Id``, protocol 2025-11-25
and before) in the process that opened it, and its id names that process: ``<hex>.<tag>``
(``ResumableSessions``; the tag is the worker's group name, ``worker_tag``). A worker that
receives a request for a session it does not hold, named for another worker, has checked the
request's origin and identified its caller already; it reads the body (within the SDK's cap)
and sends the request to the holder's group. The holder serves it as if it had received it —
the SDK checks that the session is the caller's, as always — and streams back what the SDK
answers: the response's start, then each piece of its body as it comes (an event stream lasts
as long as the client keeps it open). A message the SDK answers with 202 and no body (a
notification, or the client's response to a question) goes one way: handed to the holder's
process (Redis counts who received it) and answered 202 at once where it came, as the SDK does
before it reads the message; what only the holder can check (the session is still there, and
the caller's) is checked there, and a message refused then is logged there.

Each side watches the other. The client going away ends the request on the holder (a cancel
to its link on the holder's inbox, then ``http.disconnect``). A holder that does not take the
request within ``ACCEPT_TIMEOUT`` (a dead worker, or one that no longer holds the session)
leaves it to the receiving worker, which answers as the SDK does for a session it does not
know (404 "Session not found"), or replays a resumed stream from the shared event log
(``ElsewhereReplay``). A worker whose heartbeat stops ends the requests relayed to or from it
(``PeerWatch``). In one process (the in-memory channel layer) every session is this worker's:
nothing is relayed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from channels.layers import get_channel_layer

from chatbridge.asgi_types import ASGIApp, Message, Receive, Scope, Send
from chatbridge.cluster.messages import RelayRequest
from chatbridge.cluster.peers import worker_group
from chatbridge.cluster.reply_channels import NotDelivered, patiently
from chatbridge.mcp.callers import SCOPE_KEY, Caller
from chatbridge.mcp.events import ResumableSessions
from chatbridge.mcp.peer_watch import Peers, PeerWatch
from chatbridge.mcp.relay_wire import (
    Accepted,
    Body,
    Cancel,
    End,
    Inbox,
    Link,
    NotHeld,
    Outbox,
    Relayed,
    Start,
    answer,
    answer_accepted,
    client_gone,
    holder_tag,
    one_way,
    pieces,
    read_body,
    replaying,
    scope_of,
    send_to,
    worker_tag,
)

__all__ = ["ACCEPT_TIMEOUT", "SessionRelay"]

logger = logging.getLogger("chatbridge.mcp")

ACCEPT_TIMEOUT = 3.0  # seconds the holder has to take a request (a dead one never does)
CANCEL_GRACE = 5.0  # a relayed request whose client left has this long to end by itself
END_TIMEOUT = 10.0  # after a cancel, the holder's last word is awaited this long


class SessionRelay:
    """Relays requests for sessions other workers hold, and serves those relayed here (see the
    module docstring). ``serve`` answers a request for a session ``sessions`` holds."""

    def __init__(
        self,
        peers: Peers,
        serve: ASGIApp,
        sessions: ResumableSessions,
        *,
        accept_timeout: float = ACCEPT_TIMEOUT,
    ) -> None:
        self.peers, self.serve = peers, serve
        self.holds, self.max_body = sessions.holds, sessions.max_request_body_size
        self.json_only = sessions.json_response
        self.tag, self.accept_timeout = worker_tag(peers.worker), accept_timeout
        self.watch = PeerWatch(peers)
        self._tasks: set[asyncio.Task[None]] = set()
        self._forwarding: set[Link] = set()  # requests relayed from here, being answered
        self._inbox: Inbox | None = None  # both sides' links: made with the first

    def _later(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:
                logger.exception("relaying an MCP request failed")

        self._tasks.add(task := asyncio.create_task(run()))
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """End what is relayed to or from here (the SDK's sessions have ended already)."""
        for link in self._forwarding:
            link.queue.put_nowait("closing")
        tasks, self._tasks = set(self._tasks), set()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        if self._inbox is not None:
            await self._inbox.aclose()

    def _link(self) -> Awaitable[Link]:
        if self._inbox is None:
            self._inbox = Inbox(get_channel_layer())
        return self._inbox.link()

    # -- the worker that received the request ---------------------------------------------

    async def forward(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """Have the holder of the request's session serve it: None once it did; otherwise the
        ``receive`` to serve it here with (the session is this worker's, or its holder did not
        take it: the SDK answers "Session not found", or a resumed stream is replayed)."""
        headers = scope.get("headers") or ()
        session = next((v.decode("latin-1") for k, v in headers if k == b"mcp-session-id"), "")
        tag = holder_tag(session)
        if tag is None or tag == self.tag or self.holds(session):
            return receive
        body = await read_body(receive, self.max_body)
        if body is None:  # as the SDK answers it
            await answer(send, 413, b"Request body too large")
            return None
        caller = scope[SCOPE_KEY]
        assert isinstance(caller, Caller)
        request = RelayRequest(
            origin=self.peers.worker,
            session_id=session,
            method=scope["method"],
            path=scope["path"],
            query_string=scope.get("query_string", b"").decode("latin-1"),
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers],
            body=body,
            client=tuple(scope["client"]) if scope.get("client") else None,
            scheme=scope.get("scheme", "http"),
            http_version=scope.get("http_version", "1.1"),
            caller={"identity": caller.identity, "quota": caller.quota, "meta": dict(caller.meta)},
        )
        if one_way(scope, body, json_only=self.json_only):
            sent = await self._send_one_way(request, tag)
            if sent is not None:
                if sent:
                    await answer_accepted(send, session)
                    return None
                return replaying(body, receive)  # nobody holds it: the SDK answers 404
        if await self._relay(request, tag, receive, send):
            return None
        return replaying(body, receive)

    async def _send_one_way(self, request: RelayRequest, tag: str) -> bool | None:
        """Hand a message that needs no answer to the holder: True once it reached the holder's
        process, False if no worker listens for that holder (it is gone), None if the layer
        failed (it is relayed as any request then, riding the failure out)."""
        layer = get_channel_layer()
        try:
            await layer.group_send(worker_group(tag), request.model_dump())
        except NotDelivered:
            return False
        except Exception as exc:
            logger.info("MCP session %s: one-way relay failed: %r", request.session_id, exc)
            return None
        return True

    async def _relay(self, request: RelayRequest, tag: str, receive: Receive, send: Send) -> bool:
        """Send ``request`` to the holder and its answer to the client; False if it was not
        taken (nothing was sent to the client)."""
        link = await self._link()
        layer = link.layer
        try:
            sent = request.model_copy(update={"reply_to": link.channel, "link": link.id})
            # A holder that cannot be reached for a moment (Redis restarting) is not gone.
            message = sent.model_dump()
            group = worker_group(tag)
            await patiently(lambda: layer.group_send(group, message), self.accept_timeout, most=0.5)
            accepted = await link.next(self.accept_timeout)
        except Exception as exc:  # the channel layer is down: the holder cannot be reached
            logger.warning("MCP session %s: relaying failed: %r", request.session_id, exc)
            accepted = None
        if not isinstance(accepted, Accepted):
            await link.close()
            if accepted is None:
                logger.warning(
                    "MCP session %s: its holder %s did not answer in %s s",
                    request.session_id,
                    tag,
                    self.accept_timeout,
                )
            return False
        link.on(client_gone(receive), "client")
        link.on(self.watch.gone(accepted.worker), "peer")
        self._forwarding.add(link)
        try:
            return await self._stream(request, accepted, link, send)
        finally:
            self._forwarding.discard(link)

    async def _stream(
        self, request: RelayRequest, accepted: Accepted, link: Link, send: Send
    ) -> bool:
        """The holder's answer to the client, as it comes; True (the request is answered)."""
        started = done = over = False  # over: the holder is done with it (or dead)
        try:
            while True:
                match await link.next():
                    case Start(status=status, headers=headers):
                        started = True
                        start = {"type": "http.response.start", "status": status}
                        await send({**start, "headers": headers})
                    case Body(body=body, more_body=more):
                        done = over = not more  # a complete response is the holder's last word
                        await send({"type": "http.response.body", "body": body, "more_body": more})
                        if done:
                            break
                    case End():
                        over = True
                        break
                    case "client":
                        return True
                    case "closing":  # this worker stops: the client reconnects elsewhere
                        break
                    case "peer":
                        logger.warning(
                            "MCP session %s: its holder %s died while answering",
                            request.session_id,
                            accepted.worker,
                        )
                        over = True
                        break
                    case _:
                        pass  # nothing else is sent here
        finally:
            if over:
                await link.close()
            else:  # the client left (or this worker stops): so does the request on the holder
                await _cancel(link, accepted)
                self._later(_last_word(link))  # it closes the link once the holder ends
        if not started:  # the holder's app failed before answering, or the holder died
            await answer(send, 500, b"Internal Server Error")
        elif not done:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True

    # -- the worker holding the session ---------------------------------------------------

    def take(self, request: RelayRequest) -> None:
        """Serve a request another worker relayed here (the worker listener hands it over)."""
        self._later(self._serve(request) if request.reply_to else self._serve_one_way(request))

    async def _serve_one_way(self, request: RelayRequest) -> None:
        """A message the worker that received it answered already (202): served here, what
        the SDK answers kept for the log only."""
        if not self.holds(request.session_id):
            logger.info(
                "MCP session %s: a message for it arrived after it ended", request.session_id
            )
            return
        status: list[int] = []

        async def disconnected() -> Message:
            return {"type": "http.disconnect"}

        receive = replaying(request.body, disconnected)  # the body, then nobody listening

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))

        try:
            await asyncio.wait_for(self.serve(scope_of(request), receive, send), CANCEL_GRACE)
        except TimeoutError:
            logger.warning("MCP session %s: a relayed message was not taken", request.session_id)
        if status != [202]:
            logger.warning(
                "MCP session %s: a relayed message was refused here (%s) after the client was "
                "told it was accepted",
                request.session_id,
                status,
            )

    async def _serve(self, request: RelayRequest) -> None:
        layer = get_channel_layer()

        async def reply(message: Relayed) -> None:
            await send_to(layer, request.reply_to, request.link, message)

        if not self.holds(request.session_id):
            await reply(NotHeld())
            return
        link = await self._link()
        try:
            here = Accepted(worker=self.peers.worker, channel=link.channel, holder_link=link.id)
            await reply(here)
        except BaseException:
            await link.close()
            raise
        logger.info(
            "MCP session %s: %s relayed from %s",
            request.session_id,
            request.method,
            request.origin,
        )
        link.on(self.watch.gone(request.origin), "peer")
        gone = asyncio.Event()
        given = False

        async def receive() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        outbox = Outbox(reply)

        async def send(message: Message) -> None:
            if gone.is_set():
                return  # nobody is listening any more
            await outbox.put(pieces(message))
            if outbox.failed is not None:
                logger.warning(
                    "MCP session %s: relaying back failed: %r", request.session_id, outbox.failed
                )
                gone.set()

        async def until_gone() -> None:
            await link.next()  # a cancel, or the origin died
            gone.set()

        app = asyncio.ensure_future(self.serve(scope_of(request), receive, send))
        watching = asyncio.create_task(until_gone())
        try:
            await asyncio.wait({app, watching}, return_when=asyncio.FIRST_COMPLETED)
            if not app.done():  # the client left: the app ends on its disconnect, or is ended
                await asyncio.wait({app}, timeout=CANCEL_GRACE)
                app.cancel()
            await asyncio.wait({app})
            if not app.cancelled() and app.exception() is not None:
                logger.error(
                    "MCP session %s: a relayed request failed",
                    request.session_id,
                    exc_info=app.exception(),
                )
        finally:
            app.cancel()
            watching.cancel()
            await link.close()
            await outbox.close()  # its End is the holder's last word


async def _cancel(link: Link, accepted: Accepted) -> None:
    try:
        await send_to(link.layer, accepted.channel, accepted.holder_link, Cancel())
    except Exception as exc:  # the holder ends it when it sees this worker gone
        logger.warning("cancelling a relayed MCP request failed: %r", exc)


async def _last_word(link: Link) -> None:
    """Wait for the holder's ``End`` after a cancel, so nothing is left for nobody."""
    try:
        while True:
            message = await link.next(END_TIMEOUT)
            if message is None or isinstance(message, End):
                return
    finally:
        await link.close()
