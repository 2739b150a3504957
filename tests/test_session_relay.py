"""Legacy MCP sessions relayed to their holder (``chatbridge.mcp.session_relay``), in one
process: two endpoints, each its own worker, on the in-memory channel layer, each with a
listener taking what is relayed to it as the worker listener does. The real SDK answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from channels.layers import get_channel_layer
from mcp.server.streamable_http import GET_STREAM_KEY

from chatbridge import PluginRegistry
from chatbridge.calls.manager import SessionManager
from chatbridge.cluster.messages import RelayRequest, parse_request
from chatbridge.cluster.peers import worker_group
from chatbridge.mcp.asgi import McpEndpoint
from chatbridge.mcp.relay_wire import holder_tag, worker_tag
from chatbridge.mcp.server import McpBridge, McpSettings

VERSION = "2025-11-25"


@dataclass
class Peers:
    worker: str
    dead: set[str] = field(default_factory=set)

    async def alive(self, worker: str) -> bool:
        return worker not in self.dead


@dataclass
class Answer:
    status: int
    headers: dict[bytes, bytes]
    body: bytes

    def json(self) -> Any:
        if self.headers.get(b"content-type", b"").startswith(b"text/event-stream"):
            data = [line[5:].strip() for line in self.body.split(b"\n") if line[:5] == b"data:"]
            return [json.loads(d) for d in data if d]
        return json.loads(self.body)


class Opened(dict[Any, Any]):
    """A session transport's streams (the SDK's ``_request_streams``), saying when its GET
    stream opens."""

    def __init__(self, streams: dict[Any, Any]) -> None:
        super().__init__(streams)
        self.get_stream = asyncio.Event()

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        if key == GET_STREAM_KEY:
            self.get_stream.set()

    async def next_get_stream(self) -> None:
        await asyncio.wait_for(self.get_stream.wait(), 5)
        self.get_stream.clear()


async def listen(endpoint: McpEndpoint, worker: str) -> None:
    """What the worker listener does with a relayed request."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(worker_group(worker), channel)
    while True:
        message = parse_request(await layer.receive(channel))
        assert isinstance(message, RelayRequest) and endpoint.relay is not None
        endpoint.relay.take(message)


@pytest.fixture
async def workers() -> AsyncIterator[list[McpEndpoint]]:
    """Two workers' endpoints, public, on one channel layer."""
    async with relay_workers() as endpoints:
        yield endpoints


@contextlib.asynccontextmanager
async def relay_workers() -> AsyncIterator[list[McpEndpoint]]:
    """Two workers' endpoints, public, on the default channel layer, each listening."""
    endpoints, tasks = [], []
    for worker in ("host:1", "host:2"):
        bridge = McpBridge(PluginRegistry(), SessionManager(), McpSettings(state_keys=[b"k" * 32]))
        endpoint = McpEndpoint(bridge, allowed_hosts=["*"], public=True, peers=Peers(worker))
        await endpoint.start()
        endpoints.append(endpoint)
        tasks.append(asyncio.create_task(listen(endpoint, worker)))
    try:
        yield endpoints
    finally:
        for task in tasks:
            task.cancel()
        for endpoint in endpoints:
            await endpoint.aclose()


def scope(method: str, session: str = "", token: str = "a") -> dict[str, Any]:
    headers = [
        (b"accept", b"application/json, text/event-stream"),
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"host", b"127.0.0.1"),
    ]
    if session:
        headers += [(b"mcp-session-id", session.encode()), (b"mcp-protocol-version", b"2025-11-25")]
    return {
        "type": "http",
        "method": method,
        "path": "/mcp",
        "headers": headers,
        "query_string": b"",
        "client": ("127.0.0.1", 5000),
        "http_version": "1.1",
        "scheme": "http",
    }


async def request(
    endpoint: McpEndpoint,
    method: str,
    message: dict[str, Any] | None = None,
    *,
    session: str = "",
    token: str = "a",
    gone: asyncio.Event | None = None,
    started: asyncio.Event | None = None,
) -> Answer:
    """One HTTP request to ``endpoint``; ``gone`` set: its client goes away; ``started`` is
    set once the response has started."""
    body = json.dumps(message).encode() if message is not None else b""
    sent: list[dict[str, Any]] = []
    given = False
    left = gone or asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(dict(message))
        if started is not None:
            started.set()

    await endpoint(scope(method, session, token), receive, send)
    start = sent[0]
    content = b"".join(m.get("body", b"") for m in sent[1:])
    return Answer(start["status"], dict(start["headers"]), content)


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": VERSION,
        "capabilities": {},
        "clientInfo": {"name": "relay-test", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


async def opened(endpoint: McpEndpoint, token: str = "a") -> str:
    answer = await request(endpoint, "POST", INITIALIZE, token=token)
    assert answer.status == 200, answer
    return answer.headers[b"mcp-session-id"].decode()


def test_a_session_id_names_its_holder_and_its_group() -> None:
    tag = worker_tag("web-1.example.org:4242")
    assert tag == "web-1.example.org-4242"
    assert worker_group(tag) == worker_group("web-1.example.org:4242")
    assert holder_tag(f"{'ab' * 16}.{tag}") == tag
    assert holder_tag("ab" * 16) is None  # an untagged id (another server's, an old one)
    assert holder_tag(f"{'ab' * 16}.bad:tag") is None


async def test_requests_for_a_session_held_elsewhere_are_served_by_its_holder(
    workers: list[McpEndpoint],
) -> None:
    one, two = workers
    session = await opened(one)
    assert session.endswith(".host-1") and one.manager.holds(session)
    assert (await request(two, "POST", INITIALIZED, session=session)).status == 202
    tools = await request(two, "POST", TOOLS, session=session)
    assert tools.status == 200
    assert tools.headers[b"mcp-session-id"] == session.encode()
    [listed] = tools.json()
    assert listed["id"] == 2
    assert [tool["name"] for tool in listed["result"]["tools"]] == ["_respond"]
    assert not two.manager.holds(session)
    deleted = await request(two, "DELETE", session=session)
    assert deleted.status == 200
    assert not one.manager.holds(session)
    assert (await request(two, "POST", TOOLS, session=session)).status == 404


async def test_a_relayed_request_of_another_caller_is_not_found(
    workers: list[McpEndpoint],
) -> None:
    one, two = workers
    session = await opened(one, token="a")
    answer = await request(two, "POST", TOOLS, session=session, token="b")
    assert answer.status == 404
    assert answer.json()["error"]["message"] == "Session not found"
    assert one.manager.holds(session)  # still the first caller's


async def test_a_session_of_a_worker_that_does_not_answer_is_not_found(
    workers: list[McpEndpoint],
) -> None:
    _, two = workers
    assert two.relay is not None
    two.relay.accept_timeout = 0.2
    answer = await request(two, "POST", TOOLS, session=f"{'cd' * 16}.host-3")
    assert answer.status == 404
    assert answer.json()["error"]["message"] == "Session not found"


async def test_a_relayed_event_stream_ends_on_the_holder_when_its_client_leaves(
    workers: list[McpEndpoint],
) -> None:
    """The SDK allows one GET stream per session: the first must be over on the holder once its
    client left the other worker, or the client's next one is refused (409)."""
    one, two = workers
    session = await opened(one)
    await request(two, "POST", INITIALIZED, session=session)
    gone, opened_here = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(
        request(two, "GET", session=session, gone=gone, started=opened_here)
    )
    transport = one.manager._server_instances[session]
    transport._request_streams = streams = Opened(transport._request_streams)
    await streams.next_get_stream()  # the holder opened it
    await asyncio.wait_for(opened_here.wait(), 5)  # and its client sees it open
    gone.set()
    assert (await first).status == 200
    again, reopened = asyncio.Event(), asyncio.Event()
    second = asyncio.create_task(request(two, "GET", session=session, gone=again, started=reopened))
    await streams.next_get_stream()
    await asyncio.wait_for(reopened.wait(), 5)
    again.set()
    assert (await second).status == 200  # not 409: the first was over
