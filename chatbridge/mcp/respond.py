"""Questions for clients that cannot elicit: request notifications answered with ``_respond``.

BIDIR-6 option A (DESIGN §6): a question goes out as a ``notifications/message`` of type
``request`` (its key, message, schema or, for a URL question, its link, context and timeout);
the client answers by calling the ``_respond`` tool with the request id, from the same MCP
session and caller the request went to. The answer goes to the session like any other, which
validates it; an unanswered request expires and the tool sees ``Cancel``. A refused answer is
an error result and the request stays open, until its question has taken as many as it takes:
that answer's error result, and the call's, say the answer was refused that many times.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from chatbridge.author.elicit import Accept, ElicitRequest, ElicitResult, result_from_dict
from chatbridge.author.exceptions import ElicitNotPending, TooManyRefusedAnswers
from chatbridge.author.model_context import encode_message, with_context
from chatbridge.calls.sessions import PluginSession
from chatbridge.mcp.exits_wire import ChangeTo, change_of, exits_meta
from chatbridge.mcp.hosts import Channel, ClientGone, deliver, pinged_out, refused_too_often

__all__ = ["RESPOND_SCHEMA", "RESPOND_TOOL", "NotifyCarrier", "PendingRequests", "respond_tool"]

logger = logging.getLogger("chatbridge.mcp")

RESPOND_TOOL = "_respond"
RESPOND_SCHEMA = {
    "type": "object",
    "properties": {
        "request_id": {
            "type": "string",
            "description": "The request_id of the request notification",
        },
        "payload": {"description": "The answer: an object matching the request's schema"},
    },
    "required": ["request_id", "payload"],
}


def respond_tool() -> types.Tool:
    """``_respond`` as listed to a client that cannot elicit."""
    return types.Tool(
        name=RESPOND_TOOL,
        description="Answer a request notification (type 'request') of a running tool.",
        input_schema=RESPOND_SCHEMA,
    )


@dataclass
class _Waiting:
    session: PluginSession
    request: ElicitRequest
    client: str  # the MCP session the question went to
    caller: str  # the Authorization digest it went to
    settled: asyncio.Future[None]


@dataclass
class PendingRequests:
    """BIDIR-6 requests waiting for ``_respond``, by request id, across concurrent calls."""

    waiting: dict[str, _Waiting] = field(default_factory=dict)

    def open(self, session: PluginSession, request: ElicitRequest, client: str, caller: str) -> str:
        request_id = f"req_{uuid.uuid4().hex}"
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = _Waiting(session, request, client, caller, settled)
        return request_id

    def close(self, request_id: str) -> None:
        self.waiting.pop(request_id, None)

    async def respond(self, request_id: str, payload: Any, client: str, caller: str) -> str:
        """Deliver an answer from ``client``/``caller``. ``KeyError`` for ids that are unknown,
        settled, or were sent to someone else; returns "" when settled, else the errors (the
        request stays open)."""
        waiting = self.waiting.get(request_id)
        if (
            waiting is None
            or (waiting.client, waiting.caller) != (client, caller)
            or waiting.settled.done()
        ):
            raise KeyError(request_id)
        if (
            isinstance(payload, dict)
            and payload.get("action") in ("accept", "decline", "cancel")
            and set(payload) <= {"action", "content", "_meta"}
        ):
            meta = payload.get("_meta")
            target = change_of(meta if isinstance(meta, dict) else None)
            plain = {k: v for k, v in payload.items() if k != "_meta"}
            answer = ChangeTo(target=target) if target else result_from_dict(plain)
        elif isinstance(payload, dict):
            answer = Accept(payload)
        else:
            return await self._not_an_object(waiting)
        note = await deliver(waiting.session, waiting.request, answer)
        if not note and not waiting.settled.done():
            waiting.settled.set_result(None)
        return note or refused_too_often(waiting.session, waiting.request)

    @staticmethod
    async def _not_an_object(waiting: _Waiting) -> str:
        """A payload that is no object: a refused answer, counted like any other."""
        elicit_id = str(waiting.request.id)
        try:
            await waiting.session.refused(elicit_id, {}, {"payload": ["must be an object"]})
        except TooManyRefusedAnswers as closed:
            if not waiting.settled.done():
                waiting.settled.set_result(None)
            return str(closed)
        except ElicitNotPending:
            pass  # closed meanwhile: the call's end says how
        return "Your previous answer was not accepted: payload: must be an object."


class NotifyCarrier:
    """No elicitation: a request notification, answered through ``_respond`` within ``timeout``.

    While it waits, the client is pinged every ``heartbeat`` seconds on the call's stream: a
    client that crashed sends no close, and its call ends as its client gone, not after the
    timeout as a question nobody answered.
    """

    def __init__(
        self,
        channel: Channel,
        flat: dict[str, dict[str, Any]],
        pending: PendingRequests,
        timeout: float,
        session: PluginSession,
        client: str,
        caller: str,
        heartbeat: float = 5.0,
    ) -> None:
        self.channel, self.flat, self.pending, self.timeout = channel, flat, pending, timeout
        self.session, self.client, self.caller = session, client, caller
        self.heartbeat = heartbeat

    async def __call__(self, request: ElicitRequest, note: str) -> ElicitResult[Any] | None:
        request_id = self.pending.open(self.session, request, self.client, self.caller)
        settled = self.pending.waiting[request_id].settled
        try:
            message = f"{request.message}\n\n{note}" if note else request.message
            if request.mode != "url":  # a form's context in its message too (DESIGN §4)
                message = encode_message(message, request.context)
            await self.channel.send_log(
                "notice",
                {
                    "type": "request",
                    "request_id": request_id,
                    "request_type": request.key,
                    "mode": request.mode,
                    "message": message,
                    **(
                        {"url": request.url}  # answered on the page; _respond may decline
                        if request.mode == "url"
                        else {"schema": with_context(self.flat[request.key], request.context)}
                    ),
                    "context": request.context,
                    "exits": exits_meta(request),  # what it offers besides an answer
                    "timeout_ms": int(self.timeout * 1000),
                    "respond_with": "_respond",
                },
                "chatbridge.request",
            )
            if await self._client_gone(settled):
                raise ClientGone("the client stopped answering pings")
            if not settled.done():
                logger.info("request %s timed out after %.1fs: Cancel", request_id, self.timeout)
                await self.session.expire()
        except MCPError as exc:
            raise ClientGone(exc.error.message) from exc
        finally:
            self.pending.close(request_id)
        return None

    async def _client_gone(self, settled: asyncio.Future[None]) -> bool:
        """Wait up to ``timeout`` for ``settled``, pinging the client: did it stop answering?"""
        answered = asyncio.ensure_future(asyncio.shield(settled))
        alive = asyncio.ensure_future(pinged_out(self.channel.ctx, self.heartbeat))
        try:
            done, _ = await asyncio.wait(
                {answered, alive}, timeout=self.timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (answered, alive):
                task.cancel()
            await asyncio.wait({answered, alive})
            for task in (answered, alive):
                if not task.cancelled():
                    task.exception()  # retrieved: a stream that closed under a ping is "gone"
        return alive in done and not settled.done()
