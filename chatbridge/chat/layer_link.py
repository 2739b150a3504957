"""A socket's link to the channel layer, which outlives the layer going away.

Channels runs a consumer as one loop over two sources, the client's frames and the channel
layer; an error of either ends the consumer and closes its socket. With Redis stopped or
restarting that closed every open chat socket, although the worker can go on serving them:
its own events reach its sockets without the layer (``chatbridge.chat.broadcast``) and answers
to calls it holds need no layer either. Here the layer's side waits the outage out instead:
it backs off, joins the conversation's group again (a restarted Redis has forgotten it) and
has the conversation shown again (events of other workers published meanwhile were lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch

from chatbridge.chat.broadcast import conversation_group

__all__ = ["LayerLink"]

logger = logging.getLogger("chatbridge.chat")

BACKOFF_FIRST, BACKOFF_MAX = 0.1, 2.0


class LayerLink:
    """Mixed into a Channels async consumer showing one conversation (``conversation_id``).

    ``join`` and ``leave`` replace ``group_add``/``group_discard`` of the conversation's group;
    ``rejoined`` is awaited after an outage (show the conversation again)."""

    conversation_id: str
    channel_layer: Any
    channel_layer_alias: str
    channel_name: str
    scope: dict[str, Any]
    base_send: Any
    dispatch: Callable[[dict[str, Any]], Awaitable[None]]
    _layer_down = False

    async def rejoined(self) -> None:
        """The layer is back after an outage (overridden: show the conversation again)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Channels' ``AsyncConsumer.__call__``, with the layer's receive made to survive."""
        self.scope = scope
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        self.base_send = send
        sources = [receive]
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            sources.append(self._layer_receive)
        with contextlib.suppress(StopConsumer):
            await await_many_dispatch(sources, self.dispatch)

    async def join(self) -> None:
        """Join the conversation's group; while the layer is down, later (see above)."""
        try:
            await self.channel_layer.group_add(
                conversation_group(self.conversation_id), self.channel_name
            )
        except Exception as exc:  # its receive fails too, and joins once the layer is back
            self._went_down(exc)

    async def leave(self) -> None:
        with contextlib.suppress(Exception):  # a layer that is down forgets it anyway
            await self.channel_layer.group_discard(
                conversation_group(self.conversation_id), self.channel_name
            )

    async def _layer_receive(self) -> dict[str, Any]:
        delay = BACKOFF_FIRST
        while True:
            try:
                message: dict[str, Any] = await self.channel_layer.receive(self.channel_name)
            except Exception as exc:  # Redis stopped or restarting
                self._went_down(exc)
                await asyncio.sleep(delay)  # back off: not a busy loop while it stays down
                delay = min(delay * 2, BACKOFF_MAX)
                if await self._rejoin():
                    delay = BACKOFF_FIRST
                continue
            return message

    async def _rejoin(self) -> bool:
        if not hasattr(self, "conversation_id"):
            return False  # not connected yet
        try:
            await self.channel_layer.group_add(
                conversation_group(self.conversation_id), self.channel_name
            )
        except Exception:
            return False
        if self._layer_down:
            self._layer_down = False
            logger.info("socket of conversation %s: channel layer back", self.conversation_id)
            try:
                await self.rejoined()
            except Exception:  # the socket still gets every later event
                logger.exception("showing conversation %s again failed", self.conversation_id)
        return True

    def _went_down(self, exc: BaseException) -> None:
        if not self._layer_down:
            self._layer_down = True
            logger.warning(
                "socket of conversation %s: channel layer unavailable (%s: %s); the socket "
                "stays open and gets this worker's events",
                getattr(self, "conversation_id", "?"),
                type(exc).__name__,
                exc,
            )
