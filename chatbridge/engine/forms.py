"""The render surface that shows a conversation's open questions as forms."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from chatbridge.author.elicit import ElicitRequest
from chatbridge.author.exits import offered
from chatbridge.author.plugins import FieldErrors, FormPost
from chatbridge.engine.conversation import PendingElicit
from chatbridge.engine.protocol import ChatEvent, ElicitForm

__all__ = ["FormRenderer", "FormSurface"]


class FormRenderer(Protocol):
    """Turns a plugin template and its context into the HTML of an elicitation card."""

    def __call__(
        self,
        request: ElicitRequest,
        template_name: str,
        context: dict[str, Any],
        errors: FieldErrors,
        *,
        session_id: str,
    ) -> str: ...


class FormSurface:
    """``RenderSurface`` for conversations: publishes the form, waits for its post."""

    def __init__(
        self,
        request: ElicitRequest,
        session_id: str,
        pending: PendingElicit,
        render: FormRenderer,
        send: Callable[[ChatEvent], Awaitable[None]],
    ) -> None:
        self._request, self._session_id = request, session_id
        self._pending, self._render, self._send = pending, render, send
        self._attempt = 0

    async def show(
        self, template_name: str, context: dict[str, Any], errors: FieldErrors
    ) -> FormPost:
        request = self._request
        self._attempt += 1
        html = self._render(request, template_name, context, errors, session_id=self._session_id)
        form = ElicitForm(
            session_id=self._session_id,
            call_id=request.call_id,
            elicit_id=str(request.id),
            tool_name=request.tool_name,
            key=request.key,
            message=request.message,
            requested_schema=request.schema.json,
            context=request.context,
            errors=errors,
            attempt=self._attempt,
            html=html,
            mode=request.mode,
            url=request.url,
            exits=offered(request.exits, request.changes),
        )
        waiter: asyncio.Future[FormPost] = asyncio.get_running_loop().create_future()
        question = self._pending.session.question
        if question is not None and question.id == form.elicit_id:
            question.shown = form  # the question keeps what was shown for it
        self._pending.waiter = waiter
        await self._send(form)
        try:
            return await waiter
        finally:
            self._pending.waiter = None
