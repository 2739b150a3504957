"""Reaching every worker process through the channel layer: list and abort live sessions.

Each process that serves chats runs one listener (``chatbridge.cluster.listener``) in the
group ``chatbridge.workers`` and in a group of its own. An operator's abort is broadcast there
and carried out by whichever worker holds the session; "what is live right now" is asked of
all of them. A user's answer, abort, approve or deny for a call held by another worker is
carried to that worker. Liveness is not asked of the channel layer: each worker writes a
heartbeat to the database, so a worker whose Redis is down keeps its calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Mapping
from typing import Any

from channels.layers import get_channel_layer

from chatbridge.cluster.layer_health import note_trouble
from chatbridge.cluster.messages import (
    AbortCall,
    Aborted,
    Answered,
    CommandDone,
    Held,
    ListSessions,
    PageAnswer,
    Received,
    RoundDone,
    RoundRequest,
    RoutedAnswer,
    RoutedCommand,
    Sessions,
    Show,
    TaskDone,
    TaskRequest,
    WorkerReply,
    WorkerRequest,
    parse_reply,
)
from chatbridge.cluster.reply_channels import forget, never_heard, reply_channel
from chatbridge.engine.protocol import Abort, Approve, Deny, ElicitResponseCommand, Stop
from chatbridge.records.outage import DatabaseUnavailable, db_call
from chatbridge.records.recorder import WORKER_ID
from chatbridge.records.store import worker_alive

__all__ = [
    "WORKERS_GROUP",
    "ChannelPeers",
    "broadcast_abort",
    "deliver_page_answer",
    "query_workers",
    "route_round",
    "route_task",
    "worker_group",
]

logger = logging.getLogger("chatbridge.workers")

WORKERS_GROUP = "chatbridge.workers"
PEER_TIMEOUT = 1.5  # seconds a worker has to acknowledge a message routed to it
FORWARD_TIMEOUT = 7.0  # an abort waits for the tool to stop (its grace is 5 s)
ROUND_TIMEOUT = 30.0  # a retry may wait for a URL question's page (20 s) before it answers
TASK_TIMEOUT = 20.0  # a task request rides out a Redis restart (its worker rejoining) in this
WATCH_SECONDS = 1.0  # how often a worker asked to answer is looked at, to see if it died
ACK_SECONDS = 1.0  # a routed request not acknowledged this soon was lost, and is sent again


def worker_group(worker: str) -> str:
    """The group only ``worker`` listens to (group names allow [a-zA-Z0-9_.-])."""
    return "chatbridge.worker." + re.sub(r"[^a-zA-Z0-9_.-]", "-", worker)[:80]


async def _gather(
    message: WorkerRequest,
    timeout: float,
    stop_after: int | None,
    group: str = WORKERS_GROUP,
) -> list[WorkerReply]:
    layer = get_channel_layer()
    assert layer is not None
    replies: list[WorkerReply] = []
    async with reply_channel(layer) as reply_to:
        await layer.group_send(group, _sent(message, reply_to))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while stop_after is None or len(replies) < stop_after:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                reply = parse_reply(await asyncio.wait_for(layer.receive(reply_to), remaining))
            except TimeoutError:
                break
            if reply is not None:
                replies.append(reply)
    return replies


def _sent(message: WorkerRequest, reply_to: str) -> dict[str, Any]:
    """``message`` as the channel layer carries it, replies going to ``reply_to``."""
    return message.model_copy(update={"reply_to": reply_to}).model_dump(mode="json")


async def query_workers(timeout: float = 0.5) -> list[dict[str, Any]]:
    """Every reachable worker's live sessions: ``[{"worker": ..., "sessions": [...]}]``."""
    replies = await _gather(ListSessions(), timeout, None)
    listed = [
        r.model_dump(include={"worker", "sessions"}) for r in replies if isinstance(r, Sessions)
    ]
    return sorted(listed, key=lambda r: str(r["worker"]))


async def broadcast_abort(
    session_id: str, reason: str, by: str, timeout: float = 3.0, decided_within: float = 15.0
) -> Aborted | None:
    """Ask whichever worker holds ``session_id`` to abort it; what it decided (``said``, for
    a committed call, is what the operator is told), or None if no worker holds it.

    The holder says it holds the call at once (within ``timeout``), then what the abort
    decided; a holder that is slow to decide is still the holder (``decision`` "pending"):
    nobody else may end its call on record meanwhile."""
    layer = get_channel_layer()
    assert layer is not None
    abort = AbortCall(session_id=session_id, reason=reason, by=by)
    async with reply_channel(layer) as reply_to:
        await layer.group_send(WORKERS_GROUP, _sent(abort, reply_to))
        try:
            held = parse_reply(await asyncio.wait_for(layer.receive(reply_to), timeout))
        except TimeoutError:
            return None
        if not isinstance(held, Held):
            return None  # logged by parse_reply, or not the holder's first word
        try:
            decided = parse_reply(await asyncio.wait_for(layer.receive(reply_to), decided_within))
        except TimeoutError:
            decided = None
    if isinstance(decided, Aborted):
        return decided
    return Aborted(worker=held.worker, decision="pending")


async def deliver_page_answer(
    call_id: str,
    elicit_id: str,
    result: dict[str, Any],
    timeout: float = PEER_TIMEOUT,
    *,
    worker: str = "",
) -> bool:
    """Hand a URL question's answer (reported by its page) to ``worker``, the holder of the
    call's lease (else to whichever worker has the call waiting for it); False if it does not
    take it (the call finds the answer on record when it asks)."""
    message = PageAnswer(call_id=call_id, elicit_id=elicit_id, result=result)
    try:
        group = worker_group(worker) if worker else WORKERS_GROUP
        return bool(await _gather(message, timeout, 1, group))
    except Exception as exc:  # the channel layer is down: the answer stays on record
        logger.warning("delivering the page answer of %s failed: %s", elicit_id, exc)
        return False


async def _ask_worker(
    worker: str, message: WorkerRequest, timeout: float, what: str, *, resend: bool = True
) -> WorkerReply | None:
    """Send ``message`` to ``worker`` alone; its outcome, or None if it is gone (found dead
    while it was to answer: at once, not at the end of ``timeout``) or cannot be reached. The
    caller tells the two apart by asking whether the worker is alive.

    The worker says ``Received`` as the message reaches it, then its outcome. A message not
    acknowledged within ``ACK_SECONDS`` was lost (Redis restarted, and the worker's listener
    had not joined its group again yet) and is sent again, until ``timeout``: the requests
    sent so are each served once by their nature (a retry of a round or a task update names
    its question, a command is carried out once). ``resend`` False: sent once (a chat's
    answer: its sender tries again itself, and a copy would reach the person as a refusal)."""
    asking = asyncio.ensure_future(_until_outcome(worker, message, timeout, resend))
    watching = asyncio.ensure_future(_until_gone(worker))
    try:
        await asyncio.wait({asking, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
        if not asking.done():
            asking.cancel()
        await asyncio.wait({asking, watching})
    if asking.cancelled():
        logger.warning("%s to %s: it died before it answered", what, worker)
        return None
    exc = asking.exception()
    if exc is not None:  # the channel layer is down: the worker cannot be reached
        note_trouble()
        logger.warning("%s to %s failed: %s", what, worker, exc)
        return None
    return asking.result()


async def _until_outcome(
    worker: str, message: WorkerRequest, timeout: float, resend: bool
) -> WorkerReply | None:
    """``message`` to ``worker``, sent again while it is not acknowledged; its outcome, or
    None after ``timeout``. The channel layer failing (Redis restarting) is ridden out until
    then: it is tried again every ``ACK_SECONDS``, not taken for the worker being gone."""
    layer = get_channel_layer()
    assert layer is not None
    if never_heard(layer, worker_group(worker)):
        return None  # nobody can hear it (a worker of another process, and no shared layer)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    reply_to = ""
    received, first = False, True
    # One read of the reply channel at a time, kept across waits: a read cut short would drop
    # the channel's subscription on a pub/sub layer, and a reply arriving meanwhile with it.
    reading: asyncio.Future[Any] | None = None
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            try:
                if not reply_to:
                    reply_to = await layer.new_channel()
                if not received and (resend or first):
                    first = False
                    await layer.group_send(worker_group(worker), _sent(message, reply_to))
                wait = remaining if received or not resend else min(ACK_SECONDS, remaining)
                if reading is None:
                    reading = asyncio.ensure_future(layer.receive(reply_to))
                await asyncio.wait({reading}, timeout=wait)
                if not reading.done():
                    if received:
                        return None
                    continue  # not acknowledged: lost on the way, sent again
                arrived, reading = reading, None
                reply = parse_reply(arrived.result())
            except Exception as exc:  # the layer failed: once it is back, the message goes again
                note_trouble()
                if not resend:
                    raise
                logger.info(
                    "routing to %s: the channel layer failed (%r); trying again", worker, exc
                )
                first, received = True, False  # its outcome may have been lost with Redis too
                await asyncio.sleep(min(ACK_SECONDS, max(deadline - loop.time(), 0)))
                continue
            if isinstance(reply, Received):
                received = True
            elif reply is not None:
                return reply
    finally:
        if reading is not None:
            reading.cancel()
            await asyncio.wait({reading})
        if reply_to:  # nothing more is read on it
            with contextlib.suppress(Exception):
                await forget(layer, reply_to)


async def _until_gone(worker: str) -> None:
    """Return once ``worker`` is found dead (its process gone on this host, or its heartbeat
    stopped: ``worker_alive``); looked at every ``WATCH_SECONDS``."""
    while True:
        await asyncio.sleep(WATCH_SECONDS)
        try:
            if not await db_call(worker_alive, worker):
                return
        except DatabaseUnavailable:
            continue  # the database is away: nobody is declared dead for it


async def route_task(worker: str, request: Mapping[str, Any]) -> dict[str, Any] | None:
    """Have ``worker`` serve an MCP task request (``op``, ``task_id``, ``responses``,
    ``origin``); its reply (``{"task": ...}`` or ``{"error": {"code", "message"}}``), or None."""
    if worker == WORKER_ID or not worker:
        return None
    message = TaskRequest.model_validate(request)
    reply = await _ask_worker(worker, message, TASK_TIMEOUT, "routing a task request")
    if not isinstance(reply, TaskDone):
        return None
    if reply.error is not None:
        return {"error": reply.error.model_dump()}
    return {"task": reply.task}


async def route_round(worker: str, retry: dict[str, Any]) -> dict[str, Any] | None:
    """Have ``worker`` serve a 2026-07-28 retry of a call it holds (``mcp/round_routing.py``):
    its reply, or None if it cannot be reached (or is this worker)."""
    if worker == WORKER_ID or not worker:
        return None
    message = RoundRequest(retry=retry)
    reply = await _ask_worker(worker, message, ROUND_TIMEOUT, "routing an MCP retry")
    return reply.reply if isinstance(reply, RoundDone) else None


class ChannelPeers:
    """The other workers, reached through the channel layer (``ChatHub``'s scale-out hooks)."""

    async def alive(self, worker: str) -> bool:
        """Is ``worker``'s heartbeat recent? (This process never asks about itself.)"""
        if worker == WORKER_ID or not worker:
            return False
        return await db_call(worker_alive, worker)

    async def route(
        self, worker: str, conversation_id: str, command: ElicitResponseCommand
    ) -> dict[str, Any] | None:
        """Hand an answer to the worker holding its session; its reply, or None if it is gone."""
        if worker == WORKER_ID or not worker:
            return None
        message = RoutedAnswer(conversation_id=conversation_id, command=command)
        reply = await _ask_worker(worker, message, PEER_TIMEOUT, "routing an answer", resend=False)
        return reply.model_dump() if isinstance(reply, Answered) else None

    async def show(self, worker: str, conversation_id: str) -> None:
        """Ask ``worker`` to publish the conversation's state and open forms again."""
        if worker == WORKER_ID or not worker:
            return
        layer = get_channel_layer()
        assert layer is not None
        message = Show(conversation_id=conversation_id)
        try:
            await layer.group_send(worker_group(worker), message.model_dump(mode="json"))
        except Exception as exc:  # best effort: the socket still gets later events
            logger.warning("asking %s to show %s failed: %s", worker, conversation_id, exc)

    async def forward(
        self, worker: str, conversation_id: str, command: Abort | Approve | Deny | Stop
    ) -> dict[str, Any] | None:
        """Carry out an abort, approve or deny on ``worker``: ``{"ok": ..., "code": ...,
        "message": ...}``, or None if it cannot be reached."""
        if worker == WORKER_ID or not worker:
            return None
        message = RoutedCommand(conversation_id=conversation_id, command=command)
        reply = await _ask_worker(worker, message, FORWARD_TIMEOUT, f"forwarding {command.type}")
        if not isinstance(reply, CommandDone):
            return None
        return reply.model_dump(include={"ok", "code", "message"})
