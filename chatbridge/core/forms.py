"""The render surface that shows a conversation's open questions as forms."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from chatbridge.core.conversation import PendingElicit
from chatbridge.core.elicit import ElicitRequest
from chatbridge.core.plugins import FieldErrors, FormPost
from chatbridge.core.protocol import ChatEvent, ElicitForm

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
        on_rejected: Callable[[dict[str, Any], FieldErrors], Awaitable[None]] | None = None,
    ) -> None:
        self._request, self._session_id = request, session_id
        self._pending, self._render, self._send = pending, render, send
        self._on_rejected = on_rejected
        self._attempt = 0
        self._last: FormPost | None = None

    async def show(
        self, template_name: str, context: dict[str, Any], errors: FieldErrors
    ) -> FormPost:
        request = self._request
        if errors and self._last is not None and self._on_rejected is not None:
            await self._on_rejected(self._last.data, errors)  # the previous post was refused
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
        )
        waiter: asyncio.Future[FormPost] = asyncio.get_running_loop().create_future()
        self._pending.session.shown, self._pending.waiter = form, waiter
        await self._send(form)
        try:
            self._last = await waiter
            return self._last
        finally:
            self._pending.waiter = None
