"""Resumable MCP event streams (SEP-1699): priming events, ``retry``, and a client whose stream
is cut mid-call getting what it missed with GET + Last-Event-ID, on the worker that holds its
session and, with the event log in Redis, on another worker."""

from __future__ import annotations

import asyncio
import functools
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from chatbridge.mcp.events import MemoryEventLog, RedisEventLog, SessionEvents
from tests.raw_mcp import RawSession, SseEvent, raw_session, sse_events
from tests.servers import free_port, start_daphne, start_each, stop

CARDS = {"name": "pick_card", "arguments": {"count": 3}}


def request(method: str, params: dict[str, Any], id: int | str | None = None) -> Any:
    from mcp_types import JSONRPCNotification, JSONRPCRequest

    if id is None:
        return JSONRPCNotification(jsonrpc="2.0", method=method, params=params)
    return JSONRPCRequest(jsonrpc="2.0", id=id, method=method, params=params)


# -- the event log: scoped per session, bounded ---------------------------------------------


async def replayed(store: SessionEvents, last: str) -> tuple[str | None, list[Any]]:
    got: list[Any] = []

    async def keep(event: Any) -> None:
        got.append(event.message.method)

    stream = await store.replay_events_after(last, keep)
    return stream, got


async def test_a_session_replays_its_own_events_only() -> None:
    log = MemoryEventLog()
    mine, theirs = SessionEvents(log, "a" * 32), SessionEvents(log, "b" * 32)
    # Both sessions' first request has JSON-RPC id 1: the SDK names both streams "1".
    start = await mine.store_event("1", None)
    their_start = await theirs.store_event("1", None)
    await theirs.store_event("1", request("notifications/theirs", {}))
    await mine.store_event("1", request("notifications/mine", {}))
    assert await replayed(mine, start) == ("1", ["notifications/mine"])
    assert await replayed(mine, their_start) == (None, [])  # not its session: nothing
    assert await replayed(mine, "forged") == (None, [])
    assert await replayed(mine, f"{'a' * 32}:5:7") == (None, [])  # no such stream
    # A priming event is not kept (it carries no message): after it, a stream with nothing
    # yet replays nothing, and is resumed.
    primed = await mine.store_event("2", None)
    assert primed == f"{'a' * 32}:0:2" and await log.after(f"{'a' * 32}:2", 0) is None
    assert await replayed(mine, primed) == ("2", [])


async def test_the_memory_log_keeps_the_newest_events_within_its_caps() -> None:
    log = MemoryEventLog(max_events=3, max_bytes=10, max_streams=2)
    for data in ("aaaa", "bbbb", "cccc"):  # 12 bytes: the oldest goes
        await log.append("s", data)
    assert await log.after("s", 0) == [(2, "bbbb"), (3, "cccc")]
    assert await log.append("s", "x" * 50) == 4  # alone over the size cap: kept, alone
    assert await log.after("s", 0) == [(4, "x" * 50)]
    await log.append("t", "")
    await log.append("u", "")  # a third stream: the least recently written one goes
    assert (await log.after("s", 0), log.streams) == (None, 2)


async def commands(log: RedisEventLog) -> int:
    """The commands Redis has run (its INFO calls left out)."""
    stats = await log.redis.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


@pytest.mark.services
async def test_the_redis_log_is_shared_bounded_and_expires() -> None:
    from tests.test_worker_faults import OwnRedis

    redis = OwnRedis()
    redis.start()
    try:
        worker_a = RedisEventLog(redis.url, "test", max_events=3, max_bytes=10, ttl=60)
        worker_b = RedisEventLog(redis.url, "test", ttl=60)
        a, b = SessionEvents(worker_a, "a" * 32), SessionEvents(worker_b, "a" * 32)
        start = await a.store_event("1", None)
        await a.store_event("1", request("notifications/one", {}))
        assert await replayed(b, start) == ("1", ["notifications/one"])  # another worker
        for data in ("aaaa", "bbbb", "cccc"):
            await worker_a.append("s", data)
        assert await worker_b.after("s", 0) == [(2, "bbbb"), (3, "cccc")]
        keys = sorted(await worker_a.redis.keys("test:*"))
        ttls = [await worker_a.redis.pttl(key) for key in keys]
        assert len(keys) == 2 and all(0 < ttl <= 60_000 for ttl in ttls)  # a list a stream
        # Past the size cap the oldest go, counted from the sizes the list keeps itself.
        await worker_a.append("s", "d" * 7)
        assert await worker_b.after("s", 0) == [(4, "d" * 7)]  # "cccc" + 7 bytes is over 10
        assert await worker_a.append("s", "x" * 50) == 5  # alone over the cap: kept, alone
        assert await worker_b.after("s", 3) == [(5, "x" * 50)]
        # The writer numbers its stream's events: an append is one command (after the first,
        # which sets the stream's TTL too).
        await worker_a.append("t", "one")
        before = await commands(worker_a)
        assert await worker_a.append("t", "two") == 2
        assert await commands(worker_a) - before == 1
        assert await worker_b.after("t", 1) == [(2, "two")]
        few = RedisEventLog(redis.url, "test", ttl=60, max_streams=1)
        await few.append("p", "one")
        await few.append("q", "one")  # past its streams cap the oldest goes, from Redis too
        assert (await worker_b.after("p", 0), await worker_b.after("q", 0)) == (None, [(1, "one")])
        await few.aclose()
        await worker_a.aclose()
        await worker_b.aclose()
    finally:
        redis.kill()


# -- a client whose stream is cut mid-call ----------------------------------------------------


class Resuming:
    """A 2025-11-25 client that calls pick_card, loses the call's stream after its priming
    event, and resumes it like the spec's clients: GET + Last-Event-ID, again after ``retry``
    while the stream ends without the result. Questions and pings are answered to the session's
    own worker (``session.url``)."""

    def __init__(self, session: RawSession) -> None:
        self.session = session
        self.seen: list[str] = []
        self.visits: list[int] = []

    async def start_call(self) -> SseEvent:
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": CARDS}
        headers = self.session._headers()
        async with self.session.http.stream(
            "POST", self.session.url, json=body, headers=headers
        ) as reply:
            assert reply.status_code == 200
            async for event in sse_events(reply):
                return event  # the connection drops here: nothing else of the call was read
        raise AssertionError("the call's stream sent nothing")

    async def _answer(self, message: dict[str, Any]) -> None:
        if message["method"] == "elicitation/create":
            cards = message["params"]["requestedSchema"]["x-model-context"]["cards"]
            result = {"action": "accept", "content": {"card": cards[0]["code"]}}
        else:
            result = {}  # ping
        await self.session.send({"jsonrpc": "2.0", "id": message["id"], "result": result})

    async def resume(self, url: str, last: str, retry_ms: int) -> dict[str, Any]:
        headers = {**self.session._headers(), "Accept": "text/event-stream"}
        headers.pop("Content-Type")
        while True:
            async with self.session.http.stream(
                "GET", url, headers={**headers, "Last-Event-ID": last}
            ) as reply:
                self.visits.append(reply.status_code)
                assert reply.status_code == 200, await reply.aread()
                async for event in sse_events(reply):
                    last = event.id or last
                    retry_ms = event.retry or retry_ms
                    message = event.message
                    if message is None:
                        continue
                    self.seen.append(message.get("method", "response"))
                    if message.get("id") == 7 and "method" not in message:
                        return dict(message)
                    if "method" in message and "id" in message:
                        await self._answer(message)
            await asyncio.sleep(retry_ms / 1000)  # the server's retry, as a client must wait


def picked(result: dict[str, Any]) -> str:
    assert "result" in result, result
    return str(result["result"]["structuredContent"]["result"])


async def test_a_call_stream_starts_with_a_priming_event_and_resumes_after_a_cut(
    server: str,
) -> None:
    async with raw_session(f"{server}/mcp", "2025-11-25", {"elicitation": {}}) as session:
        client = Resuming(session)
        priming = await client.start_call()
        assert (priming.data, priming.retry) == ("", 1000) and priming.id
        async with asyncio.timeout(30):
            result = await client.resume(f"{server}/mcp", priming.id, 1000)
    assert picked(result).startswith("You picked the ")
    assert "elicitation/create" in client.seen  # asked while the stream was cut


@pytest.fixture
def two_workers() -> Iterator[tuple[str, str, list[subprocess.Popen[bytes]]]]:
    """Two daphne workers on one PostgreSQL database and the test's own Redis: their addresses,
    their processes."""
    from tests.test_scale_out import cluster_database
    from tests.test_worker_faults import OwnRedis

    redis = OwnRedis()
    redis.start()
    try:
        with cluster_database(redis.url) as env:
            env = {**env, "CHATBRIDGE_MCP_PUBLIC": "1", "CHATBRIDGE_MCP_SSE_RETRY_MS": "100"}
            ports = free_port(), free_port()
            workers = start_each(*(functools.partial(start_daphne, port, env) for port in ports))
            try:
                yield f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}", workers
            finally:
                for worker in workers:
                    stop(worker)
    finally:
        redis.kill()


@pytest.mark.slow
@pytest.mark.services
async def test_a_cut_stream_is_resumed_on_a_worker_that_does_not_hold_the_session(
    two_workers: tuple[str, str, list[subprocess.Popen[bytes]]],
) -> None:
    holder, other, _ = two_workers
    async with raw_session(f"{holder}/mcp", "2025-11-25", {"elicitation": {}}) as session:
        client = Resuming(session)
        priming = await client.start_call()
        assert (priming.data, priming.retry) == ("", 100) and priming.id
        async with asyncio.timeout(30):
            result = await client.resume(f"{other}/mcp", priming.id, 100)
        # Another session's event ids replay nothing for it: its request reaches its own
        # session's holder (relayed), whose log for that session has no such event.
        async with raw_session(f"{holder}/mcp", "2025-11-25") as stranger:
            headers = {**stranger._headers(), "Last-Event-ID": priming.id}
            refused = await stranger.http.get(f"{other}/mcp", headers=headers)
    assert picked(result).startswith("You picked the ")
    assert "elicitation/create" in client.seen
    assert set(client.visits) == {200}
    assert refused.status_code == 200 and "data:" not in refused.text, refused.text


async def question_sent(session: RawSession, url: str, last: str) -> None:
    """Resume the call's stream at ``url`` until its question arrives (left unanswered)."""
    headers = {**session._headers(), "Accept": "text/event-stream", "Last-Event-ID": last}
    headers.pop("Content-Type")
    async with session.http.stream("GET", url, headers=headers) as reply:
        async for event in sse_events(reply):
            if event.message is not None and event.message.get("method") == "elicitation/create":
                return
    raise AssertionError("the resumed stream ended without the question")


@pytest.mark.slow
@pytest.mark.services
async def test_the_stream_of_a_dead_holder_is_replayed_elsewhere_from_the_shared_log(
    two_workers: tuple[str, str, list[subprocess.Popen[bytes]]],
) -> None:
    """A resumed stream reaches its session's holder (relayed); when the holder is gone (kill
    -9), the worker reached replays what the holder kept in Redis, then ends the stream."""
    holder, other, workers = two_workers
    async with raw_session(f"{holder}/mcp", "2025-11-25", {"elicitation": {}}) as session:
        priming = await Resuming(session).start_call()
        async with asyncio.timeout(30):
            await question_sent(session, f"{holder}/mcp", priming.id)
        workers[0].kill()
        workers[0].wait()
        headers = {**session._headers(), "Accept": "text/event-stream"}
        headers.pop("Content-Type")
        replayed = await session.http.get(
            f"{other}/mcp", headers={**headers, "Last-Event-ID": priming.id}
        )
    assert replayed.status_code == 200, replayed.text
    assert "elicitation/create" in replayed.text  # kept by the dead holder, read from Redis
    assert "retry: 100" in replayed.text  # then the stream ends: the client comes back later
