"""A raw JSON-RPC MCP client over streamable HTTP: any protocol version, any capabilities.

The SDK's ``Client`` always declares form and URL elicitation and negotiates the newest
version; conformance tests need to be a 2025-06-18 client, a form-only or URL-only one, or
send exactly the JSON they mean. Server requests on a call's stream are answered by a
callback; every message the server sent is kept in order.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

import httpx2

Answer = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _no_answer(request: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError(f"unexpected server request {request['method']}")


class RawSession:
    """One initialised MCP session: ``request`` sends and collects until the response."""

    def __init__(self, http: httpx2.AsyncClient, url: str, version: str) -> None:
        self.http, self.url, self.version = http, url, version
        self.session_id = ""
        self.received: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def _headers(self) -> dict[str, str]:
        headers = dict(_HEADERS)
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
            headers["MCP-Protocol-Version"] = self.version
        return headers

    async def request(
        self, method: str, params: dict[str, Any] | None = None, answer: Answer = _no_answer
    ) -> dict[str, Any]:
        """The JSON-RPC response (``result`` or ``error``) to ``method``."""
        request_id = next(self._ids)
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
        async with self.http.stream("POST", self.url, json=body, headers=self._headers()) as reply:
            reply.raise_for_status()
            self.session_id = reply.headers.get("mcp-session-id", self.session_id)
            if reply.headers["content-type"].startswith("application/json"):
                message = json.loads(await reply.aread())
                self.received.append(message)
                return dict(message)
            async for message in _events(reply):
                self.received.append(message)
                if message.get("id") == request_id and "method" not in message:
                    return message
                if "method" in message and "id" in message:
                    result = await answer(message)
                    await self.send({"jsonrpc": "2.0", "id": message["id"], "result": result})
        raise AssertionError(f"the stream of {method} ended without a response")

    async def send(self, message: dict[str, Any]) -> None:
        """A notification or a response to a server request."""
        reply = await self.http.post(self.url, json=message, headers=self._headers())
        assert reply.status_code == 202, reply.text

    def notifications(self, method: str) -> list[dict[str, Any]]:
        return [m.get("params", {}) for m in self.received if m.get("method") == method]


async def _events(reply: httpx2.Response) -> AsyncIterator[dict[str, Any]]:
    data: list[str] = []
    async for line in reply.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            text = "\n".join(data)
            data = []
            if text:
                yield json.loads(text)


@dataclass(frozen=True)
class SseEvent:
    """One SSE event as sent: its id, its ``retry`` and its data ("" for a priming event)."""

    id: str | None
    retry: int | None
    data: str

    @property
    def message(self) -> dict[str, Any] | None:
        return json.loads(self.data) if self.data else None


async def sse_events(reply: httpx2.Response) -> AsyncIterator[SseEvent]:
    """Every event of an SSE response, priming events and ``retry`` included."""
    fields: dict[str, str] = {}
    data: list[str] | None = None
    async for line in reply.aiter_lines():
        if line:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data = [*(data or []), value]
            else:
                fields[name] = value
            continue
        if data is not None or fields:
            retry = int(fields["retry"]) if fields.get("retry", "").isdigit() else None
            yield SseEvent(fields.get("id"), retry, "\n".join(data or []))
        fields, data = {}, None


@asynccontextmanager
async def raw_session(
    url: str, version: str = "2025-11-25", capabilities: dict[str, Any] | None = None
) -> AsyncIterator[RawSession]:
    """A session initialised with ``version`` and exactly ``capabilities``."""
    async with httpx2.AsyncClient(timeout=30) as http:
        session = RawSession(http, url, version)
        reply = await session.request(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": capabilities or {},
                "clientInfo": {"name": "raw-test-client", "version": "0"},
            },
        )
        assert reply["result"]["protocolVersion"] == version, reply
        await session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield session
        with suppress(httpx2.TransportError):  # its server may be gone (a test killed it)
            await http.delete(url, headers=session._headers())
