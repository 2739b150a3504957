"""What a worker does with the channel layer's channels, on any layer: a channel for one
request's replies, dropped once done; a message sent again while the layer fails; waiting for
the layer to say it reconnected; and the failure of a message that reached nobody (raised by
``chatbridge.cluster.workers_layer``, which needs channels_redis: this module does not)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from chatbridge.cluster.layer_health import note_trouble

__all__ = ["NotDelivered", "forget", "never_heard", "patiently", "reconnected", "reply_channel"]


class NotDelivered(ConnectionError):
    """A message was published to a channel or group that nobody listens to (its receiver is
    gone, or reconnecting after Redis restarted)."""


def never_heard(layer: Any, group: str) -> bool:
    """Can no message to ``group`` ever arrive? True on a layer of this process alone (in
    memory) where nobody here is in ``group``: no other process hears it, and no restart
    brings a member back. A worker of another process on such a layer (two servers sharing a
    database and no Redis) is never reached: waiting for it would only delay the refusal."""
    from channels.layers import InMemoryChannelLayer

    return isinstance(layer, InMemoryChannelLayer) and not layer.groups.get(group)


async def forget(layer: Any, channel: str) -> None:
    """Drop ``channel``, made by ``layer.new_channel()``, once nothing more is to arrive on it
    (layers that keep nothing for a channel have nothing to drop)."""
    drop = getattr(layer, "forget", None)
    if drop is not None:
        await drop(channel)


@contextlib.asynccontextmanager
async def reply_channel(layer: Any) -> AsyncIterator[str]:
    """A channel of this process for the replies to one request, dropped after."""
    channel = await layer.new_channel()
    try:
        yield channel
    finally:
        with contextlib.suppress(Exception):  # the layer failing: nothing is kept to drop
            await forget(layer, channel)


async def patiently(
    send: Callable[[], Awaitable[None]], within: float, *, most: float = 1.0
) -> None:
    """``send`` again while the channel layer fails (Redis restarting, or the receiver's
    subscription not back yet: ``NotDelivered``), backing off up to ``most`` seconds, for
    ``within`` seconds; then its failure is raised. A receiver that cannot be reached for a
    moment is not taken for one that is gone."""
    loop = asyncio.get_running_loop()
    deadline, backoff = loop.time() + within, 0.05
    while True:
        try:
            await send()
            return
        except Exception:
            if loop.time() + backoff > deadline:
                raise
            note_trouble()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, most)


async def reconnected(layer: Any) -> None:
    """Return once ``layer`` reconnected (see ``WorkersLayer``); never for a layer that does
    not say (its receives fail instead)."""
    wait = getattr(layer, "reconnected", None)
    if wait is None:
        await asyncio.Event().wait()
    else:
        await wait()
