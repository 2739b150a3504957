"""This worker's listener in the workers' groups, and its heartbeat.

Each process that serves chats runs one listener (started with the runtime) in the group
``chatbridge.workers`` and in a group of its own (``chatbridge.cluster.peers`` sends there). It
carries out what other workers ask of the calls and conversations held here: an operator's
abort, a URL page's answer, a user's answer, abort, approve or deny, an MCP task request,
"what is live right now". It hands the events of conversations shown here that other workers
publish to this worker's sockets, and keeps what the others say they show
(the runtime's ``Viewers``, ``chatbridge.cluster.broadcast``). It is given what it serves (the
runtime's sessions, hub, broadcast and MCP tasks) instead of looking for them.

The listener is supervised: on a channel-layer error, its own or one met anywhere in the process
(``Viewers.layer_failed``), it backs off and joins its groups again (and re-joins them every few
seconds anyway, since a restarted Redis forgets them without any error reaching a blocked
receive), and so it does when the layer says it reconnected (``workers_layer.reconnected``:
its subscriptions made again after Redis restarted); once joined it says what this worker
shows, asks the others what they show, and has its sockets shown their conversations again
(events sent meanwhile may be lost). Liveness is not asked of the channel layer: each worker
writes a heartbeat to the database, so a worker whose Redis is down keeps its calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import asdict
from typing import Any, assert_never

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import DatabaseError

from chatbridge.author.elicit import result_from_dict
from chatbridge.calls.commitment import abort_decision_text
from chatbridge.calls.manager import SessionManager
from chatbridge.cluster.broadcast import (
    REFRESH_SECONDS,
    VIEWERS_GROUP,
    Broadcast,
    conversations_here,
    deliver_here,
    events_layer,
)
from chatbridge.cluster.layer_health import note_trouble
from chatbridge.cluster.messages import (
    AbortCall,
    Aborted,
    Answered,
    ChatEventCopy,
    Delivered,
    Held,
    Hidden,
    ListSessions,
    PageAnswer,
    Ping,
    Pong,
    Received,
    RelayRequest,
    RoundDone,
    RoundRequest,
    RoutedAnswer,
    RoutedCommand,
    Sessions,
    Show,
    Showing,
    ShownAck,
    TaskDone,
    TaskRequest,
    WorkerReply,
    WorkerRequest,
    parse_request,
)
from chatbridge.cluster.peers import WORKERS_GROUP, worker_group
from chatbridge.cluster.reply_channels import NotDelivered, patiently, reconnected
from chatbridge.cluster.routed_commands import routed_outcome
from chatbridge.engine.engine import ChatHub, CommandRefused
from chatbridge.engine.protocol import (
    EVENT_ADAPTER,
    ElicitResponseCommand,
    ErrorEvent,
)
from chatbridge.records.recorder import WORKER_ID
from chatbridge.records.store import HEARTBEAT_SECONDS, beat, forget_worker

__all__ = ["WorkerListener"]

logger = logging.getLogger("chatbridge.workers")

REJOIN_SECONDS = 2.0  # how often the listener re-joins its groups
BACKOFF_MAX = 2.0
REPLY_PATIENCE = 15.0  # seconds an outcome is sent again while it reaches nobody

ServeTask = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
Reply = Callable[[WorkerReply], Awaitable[None]]
Relay = Callable[[RelayRequest], None]


class WorkerListener:
    """Serves other workers' requests for what this worker holds (see the module docstring)."""

    def __init__(
        self,
        manager: SessionManager,
        hub: ChatHub,
        broadcast: Broadcast,
        serve_task: ServeTask,
        serve_round: ServeTask,
        relay: Relay | None = None,
        on_joined: Callable[[], None] | None = None,
    ) -> None:
        self.manager, self.hub = manager, hub
        self.broadcast, self.viewers = broadcast, broadcast.viewers
        self.serve_task, self.serve_round = serve_task, serve_round
        self.relay = relay  # takes a legacy MCP request relayed here (mcp/session_relay.py)
        # Told each time the listener (re)joins its groups: what it missed is on record.
        self.on_joined = on_joined
        self._tasks: list[asyncio.Task[None]] = []
        self._deliveries: set[asyncio.Task[None]] = set()
        self._stopping = False
        # Set while the listener is in its groups and has said what this worker shows.
        self.joined = asyncio.Event()

    def start(self) -> None:
        """Start the listener and the heartbeat on the running loop."""
        if self._tasks:
            raise RuntimeError("this worker listener is already running")
        self._stopping = False
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._supervise(), name="chatbridge-worker-listener"),
            loop.create_task(_heartbeat(), name="chatbridge-worker-heartbeat"),
        ]

    async def aclose(self) -> None:
        """Stop the listener and the heartbeat; the worker's calls may be taken over at once."""
        tasks, self._tasks = self._tasks, []
        self._stopping = True
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
            try:
                await sync_to_async(forget_worker)()
            except Exception:  # the heartbeat expires on its own
                logger.exception("removing the heartbeat of %s failed", WORKER_ID)
        self.viewers.stopped()

    async def _supervise(self) -> None:
        """Run the listener; after a channel-layer error, back off and start it again."""
        loop = asyncio.get_running_loop()
        backoff = 0.1
        while True:
            started = loop.time()
            try:
                await self._listen()
            except Exception as exc:  # Redis down or restarted: its groups are gone with it
                if self._stopping:
                    # The layer failed as the listener was stopped: the TaskGroup then raises
                    # the failure, not the cancellation, and carrying on would never stop.
                    # (Python 3.11's ``cancelling()`` cannot tell: a child's failure leaves
                    # it raised.)
                    return
                note_trouble()
                while isinstance(exc, ExceptionGroup) and exc.exceptions:
                    exc = exc.exceptions[0]
                logger.warning(
                    "worker listener stopped (%s: %s); rejoining", type(exc).__name__, exc
                )
            if loop.time() - started > 10 * BACKOFF_MAX:
                backoff = 0.1  # it ran well for a while: this is a new outage
            await asyncio.sleep(backoff)  # not a busy loop while Redis stays down
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _listen(self) -> None:
        layer = get_channel_layer()
        assert layer is not None
        channel = await layer.new_channel()
        events = events_layer()  # None: one process, no events from elsewhere
        heard_on = await events.new_channel() if events is not None else None
        failures: list[BaseException] = []
        failed = asyncio.Event()

        def fail(exc: BaseException) -> None:  # the layer failed elsewhere in the process
            failures.append(exc)
            failed.set()

        self.viewers.unsettled()
        self.viewers.listening(heard_on, fail)
        self.joined.clear()
        try:
            async with asyncio.TaskGroup() as group:  # any failing stops all
                group.create_task(self._rejoin(layer, channel, events, heard_on))
                group.create_task(self._receive(layer, channel))
                if events is not None and heard_on is not None:
                    group.create_task(self._receive(events, heard_on))
                group.create_task(_failed_elsewhere(failed, failures))
                group.create_task(_reconnected(layer))
        finally:
            self.viewers.listening(None, None)
            with contextlib.suppress(Exception):  # the next channel joins them again
                await layer.group_discard(WORKERS_GROUP, channel)
                await layer.group_discard(worker_group(WORKER_ID), channel)

    async def _rejoin(self, layer: Any, channel: str, events: Any, heard_on: str | None) -> None:
        """Join the groups, and join them again every few seconds (idempotent). Once joined,
        say what this worker shows (again every ``REFRESH_SECONDS``) and ask the others."""

        async def join() -> None:
            await layer.group_add(WORKERS_GROUP, channel)
            await layer.group_add(worker_group(WORKER_ID), channel)
            if events is not None and heard_on is not None:  # pub/sub: subscribed once
                await events.group_add(VIEWERS_GROUP, heard_on)

        await join()
        await self.broadcast.join_round()
        self.viewers.settled()
        self.joined.set()
        if self.on_joined is not None:
            self.on_joined()
        self._later(_show_again())
        loop = asyncio.get_running_loop()
        said = loop.time()
        while True:
            await asyncio.sleep(REJOIN_SECONDS)
            await join()
            if loop.time() - said >= REFRESH_SECONDS:  # also to be known as alive
                said = loop.time()
                await self.broadcast.announce_everything()

    async def _receive(self, layer: Any, channel: str) -> None:
        while True:
            message = parse_request(await layer.receive(channel))
            if message is None:
                continue  # logged: one bad message must not stop the listener
            try:
                await self._handle(layer, message)
            except NotDelivered as exc:  # its sender stopped waiting (or Redis restarted)
                logger.info("worker message %r: not answered: %s", message.type, exc)
            except Exception:
                logger.exception("worker message %r failed", message.type)

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` beside the listener (an abort may take seconds: not inline)."""
        self._deliveries.add(task := asyncio.create_task(work))
        task.add_done_callback(self._deliveries.discard)

    async def _handle(self, layer: Any, message: WorkerRequest) -> None:
        async def say(answer: WorkerReply) -> None:  # "received": its sender resends if lost
            await layer.send(message.reply_to, answer.model_dump(mode="json"))

        async def reply(answer: WorkerReply) -> None:  # an outcome: sent until it arrives
            await patiently(lambda: say(answer), REPLY_PATIENCE)

        match message:
            case AbortCall():  # carried out beside the listener: one abort may take seconds
                self._later(self._abort(message, say, reply))
            case PageAnswer():
                session = self.manager.get(message.call_id)
                pending = session.pending if session is not None else None
                if session is None or pending is None or str(pending.id) != message.elicit_id:
                    return  # not held here: another worker answers, or nobody (it is on record)
                await say(Delivered(worker=WORKER_ID))
                result = result_from_dict(message.result)
                await session.respond_to_elicit(pending.id, result, by_page=True)
            case Ping():
                await say(Pong(worker=WORKER_ID))
            case RoutedAnswer():
                # Acknowledge at once (the sender is waiting to know we are alive), then deliver.
                await say(Answered(worker=WORKER_ID))
                self._later(self._answer(message.conversation_id, message.command))
            case Show():
                await self.hub.show(message.conversation_id)
            case ChatEventCopy():  # an event of a conversation shown here, from its worker
                deliver_here(message.conversation_id, EVENT_ADAPTER.validate_python(message.event))
            case Showing():
                self.viewers.heard(message)
                if message.worker != WORKER_ID and (message.ask_back or message.ack):
                    try:
                        await self._answer_showing(message)
                    except Exception as exc:
                        self.viewers.layer_failed(exc)
            case ShownAck():
                self.viewers.acknowledged(message)
            case Hidden():
                self.viewers.heard(message)
            case RoutedCommand():
                await say(Received(worker=WORKER_ID))  # it may take seconds: say it came
                self._later(self._carry_out(message, reply))
            case TaskRequest():  # an MCP task held here (chatbridge.mcp.tasks)
                await say(Received(worker=WORKER_ID))
                self._later(self._serve_task(message, reply))
            case RoundRequest():  # a 2026-07-28 retry of a call held here
                await say(Received(worker=WORKER_ID))
                self._later(self._serve_round(message, reply))
            case ListSessions():
                sessions = [
                    {
                        **asdict(info),
                        "created_at": info.created_at.isoformat(),
                        "updated_at": info.updated_at.isoformat(),
                    }
                    for info in self.manager.list_active()
                ]
                await say(Sessions(worker=WORKER_ID, sessions=sessions))
            case RelayRequest():  # a request for a legacy MCP session held here
                if self.relay is not None:
                    self.relay(message)
            case _:
                assert_never(message)

    async def _abort(self, message: AbortCall, say: Reply, reply: Reply) -> None:
        session = self.manager.get(message.session_id)
        if session is None:
            return  # another worker holds it, or none
        try:
            await say(Held(worker=WORKER_ID))  # say so at once, then what the abort decided
            decision = await session.stop(message.reason, by=message.by)
            commitment = session.commitment
            said = (
                abort_decision_text(decision, commitment.what) if commitment is not None else None
            )
            await reply(Aborted(worker=WORKER_ID, decision=decision, said=said))
            if decision == "aborted":
                await session.abort(message.reason, by=message.by)
        except Exception:  # the operator is told no decision came
            logger.exception("abort of %s failed", message.session_id)

    async def _answer(self, conversation_id: str, command: ElicitResponseCommand) -> None:
        try:
            await self.hub.elicit_response(conversation_id, command)
        except CommandRefused as exc:
            refused = ErrorEvent(code=exc.code, message=str(exc))
            await self.broadcast.publish(conversation_id, refused)

    async def _serve_round(self, message: RoundRequest, reply: Reply) -> None:
        try:
            await reply(RoundDone(worker=WORKER_ID, reply=await self.serve_round(message.retry)))
        except Exception:  # the sender times out and says so
            logger.exception("routed MCP retry of %s failed", message.retry.get("call_id"))

    async def _answer_showing(self, word: Showing) -> None:
        """Another worker said it shows conversations (taken in already): say that it was,
        and what this worker shows if it asked."""
        if word.ask_back:  # first: the acknowledgement says this reached it too
            await self.broadcast.announce_everything(to=word.channel)
        if word.ack:
            layer = events_layer()
            taken = ShownAck(worker=WORKER_ID, token=word.ack)
            await layer.send(word.channel, taken.model_dump(mode="json"))

    async def _serve_task(self, message: TaskRequest, reply: Reply) -> None:
        try:
            served = await self.serve_task(message.model_dump(exclude={"type", "reply_to"}))
            await reply(TaskDone(worker=WORKER_ID, **served))
        except Exception:  # the sender times out and says so
            logger.exception("routed task request %s %s failed", message.op, message.task_id)

    async def _carry_out(self, message: RoutedCommand, reply: Reply) -> None:
        """Carry out a user's abort, approve or deny routed here; tell the sender how it went
        (if this fails, the sender times out and says so)."""
        try:
            await reply(await routed_outcome(self.hub, message.conversation_id, message.command))
        except Exception:
            logger.exception("routed %s failed", message.command.type)


class LayerFailedElsewhere(Exception):
    """The channel layer failed in this process, not in the listener's own calls."""


async def _failed_elsewhere(failed: asyncio.Event, failures: list[BaseException]) -> None:
    await failed.wait()
    exc = failures[0]
    raise LayerFailedElsewhere(f"{type(exc).__name__}: {exc}")


class LayerReconnected(Exception):
    """The channel layer's subscriptions were made again on a new connection (Redis
    restarted): messages published meanwhile were lost."""


async def _reconnected(layer: Any) -> None:
    await reconnected(layer)
    raise LayerReconnected("the channel layer reconnected; messages sent meanwhile were lost")


async def _show_again() -> None:
    """The sockets here are shown their conversations again (the state, and the open
    questions of whichever worker runs the turn)."""
    for conversation_id, sockets in conversations_here().items():
        for socket in sockets:
            try:
                await socket.rejoined()
            except Exception:  # the socket still gets every later event
                logger.exception("showing conversation %s again failed", conversation_id)


async def _heartbeat() -> None:
    """Say this worker is alive, in the database, for as long as the process runs."""
    while True:
        try:
            await sync_to_async(beat)()
        except DatabaseError as exc:  # the database may be back before the heartbeat expires
            logger.warning("heartbeat of %s failed: %s: %s", WORKER_ID, type(exc).__name__, exc)
        except Exception:
            logger.exception("heartbeat of %s failed", WORKER_ID)
        await asyncio.sleep(HEARTBEAT_SECONDS)
