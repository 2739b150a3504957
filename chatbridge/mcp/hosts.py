"""Where a tool's questions go over MCP, by what the client can do (DESIGN §6).

- ``PushHost``: legacy clients that declare elicitation get ``elicitation/create`` mid-call.
- ``ReplayHost``: 2026-07-28 clients get ``input_required``; the retry replays the journal.
- ``NotifyHost``: clients that cannot elicit get a ``type: "request"`` log notification and
  answer with the ``_respond`` tool (BIDIR-6 option A); unanswered requests time out as Cancel.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import BaseModel

from chatbridge.core.elicit import (
    Accept,
    Cancel,
    Decline,
    ElicitRequest,
    ElicitResult,
    result_from_dict,
    validate_result,
)
from chatbridge.core.exceptions import ElicitValidationError, format_errors
from chatbridge.core.journal import EntryKind, JournalEntry
from chatbridge.core.model_context import encode_message, with_context
from chatbridge.core.sampling import Sampler, SampleRequest, SampleResult

__all__ = [
    "MAX_ATTEMPTS",
    "InputRequired",
    "NotifyHost",
    "PendingRequests",
    "PushHost",
    "ReplayHost",
]

logger = logging.getLogger("chatbridge.mcp")

MAX_ATTEMPTS = 3  # invalid answers before a question is given up as Cancel


def _errors_text(exc: ElicitValidationError) -> str:
    return f"Your previous answer was not accepted: {format_errors(exc.errors)}. Please try again."


def wire_request(
    request: ElicitRequest, flat: dict[str, Any], note: str = ""
) -> types.ElicitRequestFormParams:
    """The form elicitation for ``request``: flat schema + ``x-model-context``, message with the
    boundary section; ``note`` (validation errors) goes before the boundary."""
    message = f"{request.message}\n\n{note}" if note else request.message
    return types.ElicitRequestFormParams(
        message=encode_message(message, request.context),
        requested_schema=with_context(flat, request.context),
    )


def _from_wire(action: str, content: dict[str, Any] | None) -> ElicitResult[Any]:
    if action == "accept":
        return Accept(dict(content or {}))
    return Decline() if action == "decline" else Cancel()


class _Host:
    """What every MCP host shares: sampling, progress and log notifications."""

    def __init__(
        self, ctx: ServerRequestContext[Any, Any], flat: dict[str, dict[str, Any]], sampler: Sampler
    ) -> None:
        self.ctx, self.flat, self.sampler = ctx, flat, sampler

    async def complete(self, request: SampleRequest) -> SampleResult:
        return await self.sampler(request)

    async def emit_log(self, level: str, message: str, data: dict[str, Any]) -> None:
        await self.send_log(level, {"message": message, **data}, "chatbridge.tool")

    async def send_log(self, level: str, data: dict[str, Any], logger_name: str) -> None:
        """``notifications/message``: deprecated in 2026-07-28 (clients opt in per request) but
        the only notification both protocol eras deliver, so DESIGN §6 uses it deliberately."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self.ctx.session.send_log_message(
                level,  # type: ignore[arg-type]
                data,
                logger=logger_name,
                related_request_id=self.ctx.request_id,
            )

    async def emit_progress(
        self, message: str, progress: float | None, total: float | None
    ) -> None:
        if progress is not None:
            await self.ctx.session.report_progress(progress, total, message)

    async def requested(self, seq: int, kind: EntryKind, key: str, request: dict[str, Any]) -> None:
        return None

    async def recorded(self, entry: JournalEntry) -> None:
        return None


class PushHost(_Host):
    """Legacy: ask the client with ``elicitation/create``; invalid answers are asked again."""

    async def ask(self, request: ElicitRequest) -> ElicitResult[Any]:
        note = ""
        for _ in range(MAX_ATTEMPTS):
            params = wire_request(request, self.flat[request.key], note)
            answer = await self.ctx.session.elicit_form(
                message=params.message,
                requested_schema=params.requested_schema,
                related_request_id=self.ctx.request_id,
            )
            result = _from_wire(answer.action, answer.content)
            try:
                return validate_result(
                    result, request.schema.model, str(request.id), context=request.context
                )
            except ElicitValidationError as exc:
                note = _errors_text(exc)
        return Cancel()


class InputRequired(BaseException):  # noqa: N818 - a control-flow signal, not an error
    """Stops a replayed tool at a question the client has not answered yet."""

    def __init__(self, request: ElicitRequest, note: str, attempts: int) -> None:
        self.request, self.note, self.attempts = request, note, attempts
        super().__init__(str(request.id))


class ReplayHost(_Host):
    """2026-07-28: answer from ``inputResponses`` if the client sent one, else stop the run."""

    def __init__(
        self,
        ctx: ServerRequestContext[Any, Any],
        flat: dict[str, dict[str, Any]],
        sampler: Sampler,
        responses: dict[str, Any],
        attempts: int,
    ) -> None:
        super().__init__(ctx, flat, sampler)
        self.responses, self.attempts = responses, attempts

    async def ask(self, request: ElicitRequest) -> ElicitResult[Any]:
        raw = self.responses.pop(str(request.id), None)
        if raw is None:
            raise InputRequired(request, "", 0)
        answer = types.ElicitResult.model_validate(raw) if isinstance(raw, dict) else raw
        try:
            return validate_result(
                _from_wire(answer.action, answer.content),
                request.schema.model,
                str(request.id),
                context=request.context,
            )
        except ElicitValidationError as exc:
            if self.attempts + 1 >= MAX_ATTEMPTS:
                return Cancel()
            raise InputRequired(request, _errors_text(exc), self.attempts + 1) from None


@dataclass
class _Waiting:
    future: asyncio.Future[ElicitResult[Any]]
    model: type[BaseModel]
    elicit_id: str
    caller: str
    context: dict[str, Any] = field(default_factory=dict)  # the question's, for its rules


@dataclass
class PendingRequests:
    """BIDIR-6 requests waiting for ``_respond``, by request id, across concurrent calls."""

    waiting: dict[str, _Waiting] = field(default_factory=dict)

    def open(
        self,
        model: type[BaseModel],
        elicit_id: str,
        caller: str,
        context: dict[str, Any] | None = None,
    ) -> tuple[str, asyncio.Future[ElicitResult[Any]]]:
        request_id = f"req_{uuid.uuid4().hex}"
        future: asyncio.Future[ElicitResult[Any]] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = _Waiting(future, model, elicit_id, caller, context or {})
        return request_id, future

    def close(self, request_id: str) -> None:
        self.waiting.pop(request_id, None)

    def respond(self, request_id: str, payload: Any, caller: str) -> ElicitResult[Any]:
        """Validate and deliver an answer; ``KeyError`` for unknown ids, ``ElicitValidationError``
        for invalid content (the request stays open)."""
        waiting = self.waiting.get(request_id)
        if waiting is None or waiting.caller != caller or waiting.future.done():
            raise KeyError(request_id)
        if (
            isinstance(payload, dict)
            and payload.get("action") in ("accept", "decline", "cancel")
            and set(payload) <= {"action", "content"}
        ):
            result = result_from_dict(payload)
        elif isinstance(payload, dict):
            result = Accept(payload)
        else:
            raise ElicitValidationError(
                waiting.elicit_id,
                waiting.model.__name__,
                [{"loc": ("payload",), "msg": "must be an object"}],
            )
        validated = validate_result(
            result, waiting.model, waiting.elicit_id, context=waiting.context
        )
        waiting.future.set_result(validated)
        return validated


class NotifyHost(_Host):
    """No elicitation: send a request notification, wait for ``_respond`` or the timeout."""

    def __init__(
        self,
        ctx: ServerRequestContext[Any, Any],
        flat: dict[str, dict[str, Any]],
        sampler: Sampler,
        pending: PendingRequests,
        timeout: float,
        caller: str,
    ) -> None:
        super().__init__(ctx, flat, sampler)
        self.pending, self.timeout, self.caller = pending, timeout, caller

    async def ask(self, request: ElicitRequest) -> ElicitResult[Any]:
        request_id, future = self.pending.open(
            request.schema.model, str(request.id), self.caller, request.context
        )
        try:
            await self.send_log(
                "notice",
                {
                    "type": "request",
                    "request_id": request_id,
                    "request_type": request.key,
                    "message": request.message,
                    "schema": self.flat[request.key],
                    "context": request.context,
                    "timeout_ms": int(self.timeout * 1000),
                    "respond_with": "_respond",
                },
                "chatbridge.request",
            )
            return await asyncio.wait_for(future, self.timeout)
        except TimeoutError:
            logger.info("request %s timed out after %.1fs: Cancel", request_id, self.timeout)
            return Cancel()
        finally:
            self.pending.close(request_id)
