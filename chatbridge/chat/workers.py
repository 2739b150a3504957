"""Reaching every worker process through the channel layer: list and abort live sessions.

Each process that serves chats runs one listener (started with its first socket) in the group
``chatbridge.workers``. An operator's abort is broadcast there and carried out by whichever
worker holds the session; "what is live right now" is asked of all of them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import asdict
from typing import Any

from channels.layers import get_channel_layer

from chatbridge.chat.recorder import WORKER_ID
from chatbridge.chat.runtime import get_session_manager

__all__ = [
    "WORKERS_GROUP",
    "ChannelPeers",
    "broadcast_abort",
    "ensure_listener",
    "query_workers",
    "stop_listener",
    "worker_group",
]

logger = logging.getLogger("chatbridge.workers")

WORKERS_GROUP = "chatbridge.workers"
PEER_TIMEOUT = 1.5  # seconds a worker has to answer before it counts as gone


def worker_group(worker: str) -> str:
    """The group only ``worker`` listens to (group names allow [a-zA-Z0-9_.-])."""
    return "chatbridge.worker." + re.sub(r"[^a-zA-Z0-9_.-]", "-", worker)[:80]


_listeners: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}
_deliveries: set[asyncio.Task[None]] = set()


def ensure_listener() -> None:
    """Start this process's listener on the running loop, once."""
    loop = asyncio.get_running_loop()
    task = _listeners.get(loop)
    if task is None or task.done():
        _listeners[loop] = loop.create_task(_listen(), name="chatbridge-worker-listener")


async def stop_listener() -> None:
    """Stop this process's listener on the running loop (the runtime's shutdown)."""
    task = _listeners.pop(asyncio.get_running_loop(), None)
    if task is not None and not task.done():
        task.cancel()
        await asyncio.wait({task})


async def _listen() -> None:
    layer = get_channel_layer()
    assert layer is not None
    channel = await layer.new_channel()
    await layer.group_add(WORKERS_GROUP, channel)
    await layer.group_add(worker_group(WORKER_ID), channel)
    try:
        while True:
            message = await layer.receive(channel)
            try:
                await _handle(layer, message)
            except Exception:  # one bad message must not stop the listener
                logger.exception("worker message %r failed", message.get("type"))
    finally:
        await layer.group_discard(WORKERS_GROUP, channel)
        await layer.group_discard(worker_group(WORKER_ID), channel)


async def _handle(layer: Any, message: dict[str, Any]) -> None:
    manager = get_session_manager()
    if message.get("type") == "workers.abort":
        session = manager.get(str(message.get("session_id")))
        if session is not None:  # answer first: the operator waits for the ack, not the end
            await layer.send(message["reply_to"], {"type": "workers.aborted", "worker": WORKER_ID})
            await session.abort(str(message.get("reason")), by=str(message.get("by") or ""))
    elif message.get("type") == "workers.ping":
        await layer.send(message["reply_to"], {"type": "workers.pong", "worker": WORKER_ID})
    elif message.get("type") == "workers.answer":
        from chatbridge.chat.runtime import get_hub, publish
        from chatbridge.core.engine import CommandRefused
        from chatbridge.core.protocol import ElicitResponseCommand, ErrorEvent

        command = ElicitResponseCommand.model_validate(message["command"])
        conversation_id = str(message["conversation_id"])
        # Acknowledge at once (the sender is waiting to know we are alive), then deliver.
        await layer.send(message["reply_to"], {"type": "workers.answered", "worker": WORKER_ID})

        async def deliver() -> None:
            try:
                await get_hub().elicit_response(conversation_id, command)
            except CommandRefused as exc:
                await publish(conversation_id, ErrorEvent(code=exc.code, message=str(exc)))

        _deliveries.add(task := asyncio.create_task(deliver()))
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
    session_id: str, reason: str, by: str, timeout: float = 3.0
) -> str | None:
    """Ask whichever worker holds ``session_id`` to abort it; the worker's id, or None."""
    replies = await _gather(
        {"type": "workers.abort", "session_id": session_id, "reason": reason, "by": by},
        timeout,
        1,
    )
    return str(replies[0]["worker"]) if replies else None


class ChannelPeers:
    """The other workers, reached through the channel layer (``ChatHub``'s scale-out hooks)."""

    async def alive(self, worker: str) -> bool:
        """Does ``worker`` answer a ping in time? (This process never asks itself.)"""
        if worker == WORKER_ID or not worker:
            return False
        replies = await _gather({"type": "workers.ping"}, PEER_TIMEOUT, 1, worker_group(worker))
        return bool(replies)

    async def route(self, worker: str, conversation_id: str, command: Any) -> dict[str, Any] | None:
        """Hand an answer to the worker holding its session; its reply, or None if it is gone."""
        if worker == WORKER_ID or not worker:
            return None
        message = {
            "type": "workers.answer",
            "conversation_id": conversation_id,
            "command": command.model_dump(mode="json"),
        }
        replies = await _gather(message, PEER_TIMEOUT, 1, worker_group(worker))
        return replies[0] if replies else None
