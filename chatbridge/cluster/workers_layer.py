"""The channel layer the workers speak to each other on: Redis pub/sub that says when a message
reached nobody.

What one worker asks another (route an answer, a 2026-07-28 round, a task request, relay a
legacy MCP request) needs no storage in Redis: the facts are in the database (DESIGN §11), a
message only wakes its holder, and each side listens while it waits. channels_redis's list
layer (``RedisChannelLayer``) stores every message in a sorted set and every group in another,
about twelve Redis commands for one message sent and received, and its listeners join their
groups again every few seconds. Its pub/sub layer costs one ``PUBLISH`` a message, but a message
that meets no subscriber (the receiver's connection still reconnecting after Redis restarted)
is dropped without a word.

``WorkersLayer`` is channels_redis's pub/sub layer with that word: ``PUBLISH`` answers how many
subscribers received the message, and a message that reached none raises ``NotDelivered``, a
channel-layer failure like any other. What the workers send rides such failures out already
(``chatbridge.cluster.peers`` sends again until acknowledged, a relayed answer waits until the
layer is back: ``chatbridge.mcp.relay_wire``). ``forget`` drops a channel this process made
(``new_channel``) once nothing more is to arrive on it: the layer otherwise keeps its
subscription and queue until a receive on it is cancelled. ``reconnected`` returns once the
layer's subscriptions were made again on a new connection (Redis restarted): what was published
meanwhile was lost, and the worker's listener shows its sockets their conversations again.

It leans on channels_redis 4.3's pub/sub internals (a shard's lock and its Redis client), pinned
in requirements.txt; ``tests/test_workers_layer.py`` checks them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels_redis.pubsub import (
    RedisPubSubChannelLayer,
    RedisPubSubLoopLayer,
    RedisSingleShardConnection,
)
from channels_redis.utils import _wrap_close, decode_hosts
from redis.asyncio.client import PubSub

from chatbridge.cluster.reply_channels import NotDelivered

__all__ = ["WorkersLayer"]


class _NoticingPubSub(PubSub):
    """redis-py's pub/sub connection, which subscribes again to everything as it reconnects,
    saying that it did."""

    def __init__(self, *args: Any, reconnected: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reconnected = reconnected

    async def on_connect(self, connection: Any) -> None:  # a reconnection (not the first)
        await super().on_connect(connection)
        self._reconnected()


class _WorkersShard(RedisSingleShardConnection):  # type: ignore[misc]
    def _ensure_redis(self) -> None:
        if self._redis is None:
            super()._ensure_redis()
            made: Any = self._redis
            pool = made.connection_pool
            self._pubsub = _NoticingPubSub(pool, reconnected=self.channel_layer.note_reconnect)


class _WorkersLoopLayer(RedisPubSubLoopLayer):  # type: ignore[misc]
    """One event loop's side of ``WorkersLayer``."""

    def __init__(self, hosts: Any = None, **kwargs: Any) -> None:
        super().__init__(hosts, **kwargs)
        self._shards = [_WorkersShard(host, self) for host in decode_hosts(hosts)]
        self._reconnects: list[asyncio.Future[None]] = []

    def note_reconnect(self) -> None:
        waiting, self._reconnects = self._reconnects, []
        for future in waiting:
            if not future.done():
                future.set_result(None)

    async def reconnected(self) -> None:
        """Return once this process's subscriptions were made again on a new connection
        (Redis restarted, or the connection was cut): what was published to them meanwhile
        did not arrive."""
        future = asyncio.get_running_loop().create_future()
        self._reconnects.append(future)
        await future

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        await self._publish(channel, message)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        await self._publish(self._get_group_channel_name(group), message)

    async def _publish(self, name: str, message: dict[str, Any]) -> None:
        shard = self._get_shard(name)
        data = self.channel_layer.serialize(message)
        async with shard._lock:  # one connection, in order, as the layer publishes
            shard._ensure_redis()
            reached = await shard._redis.publish(name, data)
        if not reached:
            raise NotDelivered(f"nobody listens on {name}")

    async def forget(self, channel: str) -> None:
        """Unsubscribe from ``channel`` (made here) and drop what waits on it."""
        if self.channels.pop(channel, None) is not None:
            await self._get_shard(channel).unsubscribe(channel)


class WorkersLayer(RedisPubSubChannelLayer):  # type: ignore[misc]
    """``CHANNEL_LAYERS["default"]`` on Redis (see the module docstring); configured as
    channels_redis's pub/sub layer is (``hosts``, ``prefix``)."""

    def _get_layer(self) -> _WorkersLoopLayer:
        loop = asyncio.get_running_loop()
        layer: _WorkersLoopLayer | None = self._layers.get(loop)
        if layer is None:
            layer = _WorkersLoopLayer(*self._args, **self._kwargs, channel_layer=self)
            self._layers[loop] = layer
            _wrap_close(self, loop)
        return layer

    def __getattr__(self, name: str) -> Any:
        if name in ("forget", "reconnected"):
            return getattr(self._get_layer(), name)
        return super().__getattr__(name)
