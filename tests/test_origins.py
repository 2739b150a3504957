"""Which origins may open a chat socket or call /mcp: the site's own (host and port), or one
listed in CSRF_TRUSTED_ORIGINS. Another port of the same host is another site."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from pytest_django.fixtures import Settings

from chatbridge.chat.routing import websocket_urlpatterns
from chatbridge.origins import SameOriginValidator, origin_allowed
from tests.chat_client import new_browser_session, new_conversation
from tests.servers import free_port, migrated_env, start_daphne, stop

HOSTS = ["127.0.0.1", "localhost", "[::1]", ".example.org"]
TRUSTED = ["https://app.example.test", "http://127.0.0.1:5173"]


@pytest.mark.parametrize(
    ("origin", "host", "scheme"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", "ws"),
        ("https://chat.example.org", "chat.example.org", "ws"),  # TLS ends at a proxy
        ("https://chat.example.org", "chat.example.org", "wss"),
        ("http://chat.example.org", "chat.example.org:80", "ws"),  # explicit default port
        ("HTTP://LocalHost:8000", "localhost:8000", "ws"),
        ("http://[::1]:8000", "[::1]:8000", "ws"),
        ("https://app.example.test", "127.0.0.1:8000", "ws"),  # trusted
        ("http://127.0.0.1:5173", "127.0.0.1:8000", "ws"),  # trusted: a dev server's port
        ("http://127.0.0.1:8000", "127.0.0.1:8000", "http"),  # /mcp
    ],
)
def test_the_sites_own_origin_and_trusted_ones_are_allowed(
    origin: str, host: str, scheme: str
) -> None:
    assert origin_allowed(origin, host, scheme, allowed_hosts=HOSTS, trusted_origins=TRUSTED)


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("http://127.0.0.1:9999", "127.0.0.1:8000"),  # another app on the same host
        ("http://127.0.0.1", "127.0.0.1:8000"),
        ("http://127.0.0.1:8000", "127.0.0.1"),
        ("http://localhost:8000", "127.0.0.1:8000"),  # same machine, another site
        ("http://evil.example:8000", "evil.example:8000"),  # DNS rebinding: host not allowed
        ("https://app.example.test:8443", "127.0.0.1:8000"),  # not exactly the trusted one
        ("http://app.example.test", "127.0.0.1:8000"),
        ("https://app.example.test", "evil.example"),  # trusted origin, foreign Host
        (None, "127.0.0.1:8000"),  # no Origin: not a browser page we know
        ("null", "127.0.0.1:8000"),  # sandboxed frames, file:// pages
        ("http://127.0.0.1:8000", None),
        ("not a url", "127.0.0.1:8000"),
    ],
)
def test_other_origins_are_refused(origin: str | None, host: str | None) -> None:
    assert not origin_allowed(origin, host, "ws", allowed_hosts=HOSTS, trusted_origins=TRUSTED)


# The chat's WebSocket route, guarded by the validator as chatbridge.serving does it.
application = SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))


async def attempt(origin: str | None, host: str = "127.0.0.1:8000") -> WebsocketCommunicator:
    key = await new_browser_session()
    headers = [(b"cookie", f"sessionid={key}".encode()), (b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    conversation = await new_conversation(key)
    return WebsocketCommunicator(application, f"/ws/chat/{conversation}/?format=json", headers)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_runtime")
class TestTheChatSocket:
    async def refused(self, socket: WebsocketCommunicator) -> None:
        connected, _ = await socket.connect(timeout=10)
        assert connected is False  # closed before accept: the handshake gets HTTP 403

    async def accepted(self, socket: WebsocketCommunicator) -> None:
        connected, code = await socket.connect(timeout=10)
        assert connected, f"refused with {code}"
        assert json.loads(await socket.receive_from(timeout=10))["type"] == "conversation_state"
        await socket.disconnect()

    async def test_a_page_on_another_port_of_the_host_is_refused(self) -> None:
        await self.refused(await attempt("http://127.0.0.1:9999"))

    async def test_a_socket_without_origin_is_refused(self) -> None:
        await self.refused(await attempt(None))

    async def test_the_sites_own_pages_are_accepted(self) -> None:
        await self.accepted(await attempt("http://127.0.0.1:8000"))

    async def test_a_trusted_origin_is_accepted(self, settings: Settings) -> None:
        settings.CSRF_TRUSTED_ORIGINS = ["https://app.example.test"]
        await self.accepted(await attempt("https://app.example.test"))
        settings.CSRF_TRUSTED_ORIGINS = []
        await self.refused(await attempt("https://app.example.test"))


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """daphne with https://app.example.test in CSRF_TRUSTED_ORIGINS."""
    env = migrated_env(tmp_path_factory.mktemp("origins") / "db.sqlite3", "tests.origin_settings")
    port = free_port()
    proc = start_daphne(port, env)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


def initialize(server: str, origin: str | None) -> tuple[int, bytes]:
    """Status and body of an MCP ``initialize`` posted with ``origin``."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "origin-test", "version": "1"},
        },
    }
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if origin is not None:
        headers["Origin"] = origin
    request = urllib.request.Request(
        f"{server}/mcp", data=json.dumps(body).encode(), method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, refused.read()


def test_mcp_refuses_a_page_on_another_port_of_the_host(mcp_server: str) -> None:
    status, body = initialize(mcp_server, "http://127.0.0.1:9999")
    assert status == 403
    assert json.loads(body) == {
        "error": "forbidden_origin",
        "detail": "Requests from http://127.0.0.1:9999 are refused: only this site's own "
        "origin, or one listed in CSRF_TRUSTED_ORIGINS, may call /mcp from a browser.",
    }


def test_mcp_serves_its_own_origin_trusted_ones_and_clients_without_origin(
    mcp_server: str,
) -> None:
    assert initialize(mcp_server, mcp_server)[0] == 200
    assert initialize(mcp_server, "https://app.example.test")[0] == 200
    assert initialize(mcp_server, None)[0] == 200  # MCP clients that are not browsers
