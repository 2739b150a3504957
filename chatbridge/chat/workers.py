"""Reaching every worker process through the channel layer: list and abort live sessions.

Each process that serves chats runs one listener (started with its first socket) in the group
``chatbridge.workers``. An operator's abort is broadcast there and carried out by whichever
worker holds the session; "what is live right now" is asked of all of them. A user's answer,
abort, approve or deny for a call held by another worker is carried to that worker.

The listener is supervised: on a channel-layer error it backs off and joins its groups again
(and re-joins them every few seconds anyway, since a restarted Redis forgets them without any
error reaching a blocked receive). Liveness is not asked of the channel layer: each worker
writes a heartbeat to the database, so a worker whose Redis is down keeps its calls.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import asdict
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import DatabaseError

from chatbridge.chat.outage import db_call
from chatbridge.chat.recorder import WORKER_ID
from chatbridge.chat.store import HEARTBEAT_SECONDS, beat, forget_worker, worker_alive
from chatbridge.core.commitment import abort_decision_text
from chatbridge.runtime import current_runtime

__all__ = [
    "WORKERS_GROUP",
    "ChannelPeers",
    "broadcast_abort",
    "deliver_page_answer",
    "ensure_listener",
    "query_workers",
    "route_task",
    "stop_listener",
    "worker_group",
]

logger = logging.getLogger("chatbridge.workers")

WORKERS_GROUP = "chatbridge.workers"
PEER_TIMEOUT = 1.5  # seconds a worker has to acknowledge a message routed to it
FORWARD_TIMEOUT = 7.0  # an abort waits for the tool to stop (its grace is 5 s)
REJOIN_SECONDS = 2.0  # how often the listener re-joins its groups
BACKOFF_MAX = 2.0


def worker_group(worker: str) -> str:
    """The group only ``worker`` listens to (group names allow [a-zA-Z0-9_.-])."""
    return "chatbridge.worker." + re.sub(r"[^a-zA-Z0-9_.-]", "-", worker)[:80]


_listeners: dict[asyncio.AbstractEventLoop, list[asyncio.Task[None]]] = {}
_deliveries: set[asyncio.Task[None]] = set()


def ensure_listener() -> None:
    """Start this process's listener and heartbeat on the running loop, once."""
    loop = asyncio.get_running_loop()
    tasks = _listeners.get(loop)
    if tasks is None or any(t.done() for t in tasks):
        for task in tasks or ():
            task.cancel()
        _listeners[loop] = [
            loop.create_task(_supervise(), name="chatbridge-worker-listener"),
            loop.create_task(_heartbeat(), name="chatbridge-worker-heartbeat"),
        ]


async def stop_listener() -> None:
    """Stop the listener and the heartbeat; the worker's calls may be taken over at once."""
    tasks = _listeners.pop(asyncio.get_running_loop(), [])
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks)
        try:
            await sync_to_async(forget_worker)()
        except Exception:  # the heartbeat expires on its own
            logger.exception("removing the heartbeat of %s failed", WORKER_ID)


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


async def _supervise() -> None:
    """Run the listener; after a channel-layer error, back off and start it again."""
    loop = asyncio.get_running_loop()
    backoff = 0.1
    while True:
        started = loop.time()
        try:
            await _listen()
        except Exception as exc:  # Redis down or restarted: its groups are gone with it
            while isinstance(exc, ExceptionGroup) and exc.exceptions:
                exc = exc.exceptions[0]
            logger.warning("worker listener stopped (%s: %s); rejoining", type(exc).__name__, exc)
        if loop.time() - started > 10 * BACKOFF_MAX:
            backoff = 0.1  # it ran well for a while: this is a new outage
        await asyncio.sleep(backoff)  # not a busy loop while Redis stays down
        backoff = min(backoff * 2, BACKOFF_MAX)


async def _listen() -> None:
    layer = get_channel_layer()
    assert layer is not None
    channel = await layer.new_channel()
    async with asyncio.TaskGroup() as group:  # either failing stops both
        group.create_task(_rejoin(layer, channel))
        group.create_task(_receive(layer, channel))


async def _rejoin(layer: Any, channel: str) -> None:
    """Join the groups, and join them again every few seconds (idempotent)."""
    while True:
        await layer.group_add(WORKERS_GROUP, channel)
        await layer.group_add(worker_group(WORKER_ID), channel)
        await asyncio.sleep(REJOIN_SECONDS)


async def _receive(layer: Any, channel: str) -> None:
    while True:
        message = await layer.receive(channel)
        try:
            await _handle(layer, message)
        except Exception:  # one bad message must not stop the listener
            logger.exception("worker message %r failed", message.get("type"))


async def _handle(layer: Any, message: dict[str, Any]) -> None:
    manager = current_runtime().manager
    if message.get("type") == "workers.abort":
        session = manager.get(str(message.get("session_id")))
        if session is not None:  # held here: say so at once, then what the abort decided
            await layer.send(message["reply_to"], {"type": "workers.held", "worker": WORKER_ID})
            reason, by = str(message.get("reason")), str(message.get("by") or "")
            decision = await session.stop(reason, by=by)
            commitment = session.commitment
            reply = {"type": "workers.aborted", "worker": WORKER_ID, "decision": decision}
            if commitment is not None:
                reply["said"] = abort_decision_text(decision, commitment.what)
            await layer.send(message["reply_to"], reply)
            if decision == "aborted":
                await session.abort(reason, by=by)
    elif message.get("type") == "workers.page_answer":
        from chatbridge.core.elicit import result_from_dict

        session = manager.get(str(message.get("call_id")))
        pending = session.pending if session is not None else None
        if session is None or pending is None or str(pending.id) != message.get("elicit_id"):
            return  # not held here: another worker answers, or nobody (it is on record)
        await layer.send(message["reply_to"], {"type": "workers.delivered", "worker": WORKER_ID})
        await session.respond_to_elicit(
            pending.id, result_from_dict(message["result"]), by_page=True
        )
    elif message.get("type") == "workers.ping":
        await layer.send(message["reply_to"], {"type": "workers.pong", "worker": WORKER_ID})
    elif message.get("type") == "workers.answer":
        from chatbridge.chat.broadcast import publish
        from chatbridge.core.engine import CommandRefused
        from chatbridge.core.protocol import ElicitResponseCommand, ErrorEvent

        command = ElicitResponseCommand.model_validate(message["command"])
        conversation_id = str(message["conversation_id"])
        # Acknowledge at once (the sender is waiting to know we are alive), then deliver.
        await layer.send(message["reply_to"], {"type": "workers.answered", "worker": WORKER_ID})

        async def deliver() -> None:
            try:
                await current_runtime().hub.elicit_response(conversation_id, command)
            except CommandRefused as exc:
                await publish(conversation_id, ErrorEvent(code=exc.code, message=str(exc)))

        _deliveries.add(task := asyncio.create_task(deliver()))
        task.add_done_callback(_deliveries.discard)
    elif message.get("type") == "workers.show":
        await current_runtime().hub.show(str(message["conversation_id"]))
    elif message.get("type") == "workers.command":  # an abort may take seconds: not inline

        async def carry_out() -> None:
            try:
                await layer.send(message["reply_to"], await _carry_out(message))
            except Exception:  # the sender times out and says so
                logger.exception("routed %s failed", message.get("command"))

        _deliveries.add(task := asyncio.create_task(carry_out()))
        task.add_done_callback(_deliveries.discard)
    elif message.get("type") == "workers.task":  # an MCP task held here (chatbridge.mcp.tasks)

        async def serve_task() -> None:
            reply = await current_runtime().mcp.bridge.tasks.serve_routed(message)
            await layer.send(message["reply_to"], {"type": "workers.task_done", **reply})

        _deliveries.add(task := asyncio.create_task(serve_task()))
        task.add_done_callback(_deliveries.discard)
    elif message.get("type") == "workers.list":
        sessions = [
            {
                **asdict(info),
                "created_at": info.created_at.isoformat(),
                "updated_at": info.updated_at.isoformat(),
            }
            for info in manager.list_active()
        ]
        await layer.send(
            message["reply_to"],
            {"type": "workers.sessions", "worker": WORKER_ID, "sessions": sessions},
        )


async def _carry_out(message: dict[str, Any]) -> dict[str, Any]:
    """Carry out a user's abort, approve or deny routed here; the outcome for the sender."""
    from chatbridge.core.engine import CommandRefused
    from chatbridge.core.protocol import Abort, Approve, parse_command

    command = parse_command(message["command"])
    conversation_id = str(message["conversation_id"])
    hub = current_runtime().hub
    try:
        if isinstance(command, Abort):
            await hub.abort(conversation_id, command.session_id, command.reason, routed=True)
        elif isinstance(command, Approve):
            await hub.decide(conversation_id, command.call_id, True, routed=True)
        elif command.type == "deny":
            await hub.decide(conversation_id, command.call_id, False, command.reason, routed=True)
        elif command.type == "stop":
            await hub.stop(conversation_id, routed=True)
        else:
            return {
                "type": "workers.done",
                "worker": WORKER_ID,
                "ok": False,
                "code": "BAD_COMMAND",
                "message": f"A {command.type!r} command is not routed between workers.",
            }
    except CommandRefused as exc:
        return {
            "type": "workers.done",
            "worker": WORKER_ID,
            "ok": False,
            "code": exc.code,
            "message": str(exc),
        }
    return {"type": "workers.done", "worker": WORKER_ID, "ok": True}


async def _gather(
    message: dict[str, Any],
    timeout: float,
    stop_after: int | None,
    group: str = WORKERS_GROUP,
) -> list[dict[str, Any]]:
    layer = get_channel_layer()
    assert layer is not None
    reply_to = await layer.new_channel()
    await layer.group_send(group, {**message, "reply_to": reply_to})
    replies: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while stop_after is None or len(replies) < stop_after:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        try:
            replies.append(await asyncio.wait_for(layer.receive(reply_to), remaining))
        except TimeoutError:
            break
    return replies


async def query_workers(timeout: float = 0.5) -> list[dict[str, Any]]:
    """Every reachable worker's live sessions: ``[{"worker": ..., "sessions": [...]}]``."""
    replies = await _gather({"type": "workers.list"}, timeout, None)
    return sorted(replies, key=lambda r: str(r.get("worker")))


async def broadcast_abort(
    session_id: str, reason: str, by: str, timeout: float = 3.0, decided_within: float = 15.0
) -> dict[str, Any] | None:
    """Ask whichever worker holds ``session_id`` to abort it; its reply (``worker``,
    ``decision``, and ``said`` for a committed call), or None if no worker holds it.

    The holder says it holds the call at once (within ``timeout``), then what the abort
    decided; a holder that is slow to decide is still the holder (``decision`` "pending"):
    nobody else may end its call on record meanwhile."""
    layer = get_channel_layer()
    assert layer is not None
    reply_to = await layer.new_channel()
    abort = {"type": "workers.abort", "session_id": session_id, "reason": reason, "by": by}
    await layer.group_send(WORKERS_GROUP, {**abort, "reply_to": reply_to})
    try:
        held = await asyncio.wait_for(layer.receive(reply_to), timeout)
    except TimeoutError:
        return None
    try:
        return dict(await asyncio.wait_for(layer.receive(reply_to), decided_within))
    except TimeoutError:
        return {"worker": held.get("worker"), "decision": "pending"}


async def deliver_page_answer(
    call_id: str, elicit_id: str, result: dict[str, Any], timeout: float = PEER_TIMEOUT
) -> bool:
    """Hand a URL question's answer (reported by its page) to whichever worker holds the call
    waiting for it; False if none does (the call finds the answer on record when it asks)."""
    message = {
        "type": "workers.page_answer",
        "call_id": call_id,
        "elicit_id": elicit_id,
        "result": result,
    }
    try:
        return bool(await _gather(message, timeout, 1))
    except Exception as exc:  # the channel layer is down: the answer stays on record
        logger.warning("delivering the page answer of %s failed: %s", elicit_id, exc)
        return False


async def _ask_worker(
    worker: str, message: dict[str, Any], timeout: float, what: str
) -> dict[str, Any] | None:
    """Send ``message`` to ``worker`` alone; its first reply, or None if it is gone or the
    channel layer is down."""
    try:
        replies = await _gather(message, timeout, 1, worker_group(worker))
    except Exception as exc:  # the channel layer is down: the worker cannot be reached
        logger.warning("%s to %s failed: %s", what, worker, exc)
        return None
    return replies[0] if replies else None


async def route_task(worker: str, message: dict[str, Any]) -> dict[str, Any] | None:
    """Have ``worker`` serve an MCP task request (get, update, cancel); its reply, or None."""
    if worker == WORKER_ID or not worker:
        return None
    return await _ask_worker(
        worker, {**message, "type": "workers.task"}, FORWARD_TIMEOUT, "routing a task request"
    )


class ChannelPeers:
    """The other workers, reached through the channel layer (``ChatHub``'s scale-out hooks)."""

    async def alive(self, worker: str) -> bool:
        """Is ``worker``'s heartbeat recent? (This process never asks about itself.)"""
        if worker == WORKER_ID or not worker:
            return False
        return await db_call(worker_alive, worker)

    async def route(self, worker: str, conversation_id: str, command: Any) -> dict[str, Any] | None:
        """Hand an answer to the worker holding its session; its reply, or None if it is gone."""
        if worker == WORKER_ID or not worker:
            return None
        message = {
            "type": "workers.answer",
            "conversation_id": conversation_id,
            "command": command.model_dump(mode="json"),
        }
        return await _ask_worker(worker, message, PEER_TIMEOUT, "routing an answer")

    async def show(self, worker: str, conversation_id: str) -> None:
        """Ask ``worker`` to publish the conversation's state and open forms again."""
        if worker == WORKER_ID or not worker:
            return
        layer = get_channel_layer()
        assert layer is not None
        message = {"type": "workers.show", "conversation_id": conversation_id}
        try:
            await layer.group_send(worker_group(worker), message)
        except Exception as exc:  # best effort: the socket still gets later events
            logger.warning("asking %s to show %s failed: %s", worker, conversation_id, exc)

    async def forward(
        self, worker: str, conversation_id: str, command: Any
    ) -> dict[str, Any] | None:
        """Carry out an abort, approve or deny on ``worker``; its outcome, or None."""
        if worker == WORKER_ID or not worker:
            return None
        message = {
            "type": "workers.command",
            "conversation_id": conversation_id,
            "command": command.model_dump(mode="json"),
        }
        return await _ask_worker(worker, message, FORWARD_TIMEOUT, f"forwarding {command.type}")
