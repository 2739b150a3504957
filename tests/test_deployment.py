"""The production configuration, as an operator and an attacker meet it.

Settings are read from the environment in fresh processes; servers are started by the
commands of docs/production.md (uvicorn) or like ``make run`` (daphne), and spoken to over
real sockets.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import shutil
import socket
import stat
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlencode, urlsplit

import pytest
from django.core.exceptions import ImproperlyConfigured

from chatbridge.author.plugins import PluginRegistry
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.calls.manager import SessionManager
from chatbridge.environment import (
    database_from_url,
    env_flag,
    env_list,
    load_or_create_secret,
    proxy_ssl_header,
)
from chatbridge.mcp.asgi import McpEndpoint
from chatbridge.mcp.callers import Caller, Refusal
from chatbridge.mcp.server import McpBridge, McpSettings
from tests.production import Production, production_env
from tests.servers import ROOT, free_port, migrated_template, start_daphne, stop

OLD_CONSTANT = "chatbridge-development-only-not-secret"


@dataclass
class Reply:
    status: int
    headers: Message
    body: str


def request(
    base: str,
    path: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: str | None = None,
) -> Reply:
    """One HTTP request with exactly the headers given (Host included, when given)."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return Reply(response.status, response.msg, response.read().decode(errors="replace"))
    finally:
        conn.close()


def settings_of(env: dict[str, str], *names: str) -> dict[str, Any]:
    """Settings as a fresh process configured by ``env`` sees them."""
    code = (
        "import json, django\n"
        "django.setup()\n"
        "from django.conf import settings\n"
        f"print(json.dumps({{n: getattr(settings, n) for n in {list(names)!r}}}, default=str))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


# -- settings ----------------------------------------------------------------------------------


def test_without_any_setting_the_app_runs_in_production_mode(tmp_path: Path) -> None:
    env = production_env(tmp_path)
    del env["DJANGO_SECRET_KEY"]
    env["DJANGO_SECRET_KEY_FILE"] = str(tmp_path / "secret")
    seen = settings_of(
        env, "DEBUG", "CHATBRIDGE_MCP_PUBLIC", "CHATBRIDGE_MCP_TOKEN", "STORAGES", "SECRET_KEY"
    )
    assert seen["DEBUG"] is False
    assert seen["CHATBRIDGE_MCP_PUBLIC"] is False and seen["CHATBRIDGE_MCP_TOKEN"] == ""
    assert seen["STORAGES"]["staticfiles"]["BACKEND"] == (
        "servestatic.storage.CompressedManifestStaticFilesStorage"
    )
    assert seen["SECRET_KEY"] == (tmp_path / "secret").read_text().strip()


def test_debug_and_an_open_mcp_are_asked_for(tmp_path: Path) -> None:
    seen = settings_of(production_env(tmp_path, DJANGO_DEBUG="1"), "DEBUG", "CHATBRIDGE_MCP_PUBLIC")
    assert seen == {"DEBUG": True, "CHATBRIDGE_MCP_PUBLIC": True}
    seen = settings_of(
        production_env(tmp_path, DJANGO_DEBUG="1", CHATBRIDGE_MCP_PUBLIC="0"),
        "CHATBRIDGE_MCP_PUBLIC",
    )
    assert seen == {"CHATBRIDGE_MCP_PUBLIC": False}


def test_a_misspelt_flag_stops_the_start_instead_of_meaning_no(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=production_env(tmp_path, DJANGO_HTTPS="ture"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "DJANGO_HTTPS='ture' is not a flag; use 1 or 0." in result.stderr


def test_the_secret_key_is_made_once_kept_private_and_never_a_constant(tmp_path: Path) -> None:
    key_file = tmp_path / "keys" / "secret"
    env = production_env(tmp_path, DJANGO_SECRET_KEY_FILE=str(key_file))
    del env["DJANGO_SECRET_KEY"]
    first = settings_of(env, "SECRET_KEY")["SECRET_KEY"]
    second = settings_of(env, "SECRET_KEY")["SECRET_KEY"]
    assert first == second != OLD_CONSTANT
    assert len(first) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    other = production_env(tmp_path / "other", DJANGO_SECRET_KEY_FILE=str(tmp_path / "other-key"))
    del other["DJANGO_SECRET_KEY"]
    assert settings_of(other, "SECRET_KEY")["SECRET_KEY"] not in (first, OLD_CONSTANT)
    given = settings_of({**env, "DJANGO_SECRET_KEY": "k" * 50}, "SECRET_KEY")
    assert given == {"SECRET_KEY": "k" * 50}


def test_processes_starting_together_agree_on_one_secret(tmp_path: Path) -> None:
    key_file = tmp_path / "secret"
    code = (
        "import sys; from pathlib import Path\n"
        "from chatbridge.environment import load_or_create_secret\n"
        "print(load_or_create_secret(Path(sys.argv[1])))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(key_file)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    keys = {proc.communicate(timeout=60)[0].strip() for proc in procs}
    assert keys == {key_file.read_text().strip()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret"]  # no drafts left behind


def test_a_short_secret_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    key_file = tmp_path / "secret"
    key_file.write_text("short\n")
    with pytest.raises(ImproperlyConfigured, match="too short .5 characters.; delete the file"):
        load_or_create_secret(key_file)


def test_environment_values_are_read_strictly() -> None:
    assert proxy_ssl_header("") is None
    assert proxy_ssl_header("X-Forwarded-Proto") == ("HTTP_X_FORWARDED_PROTO", "https")
    assert proxy_ssl_header("X-Forwarded-Ssl=on") == ("HTTP_X_FORWARDED_SSL", "on")
    with pytest.raises(ImproperlyConfigured, match="is not a header name"):
        proxy_ssl_header("X Forwarded Proto")
    assert env_list({"H": " a.example , ,b.example"}, "H") == ["a.example", "b.example"]
    assert env_flag({}, "F", True) is True and env_flag({"F": "off"}, "F", True) is False


def test_database_urls_give_a_pool_for_postgresql_and_waiting_writers_for_sqlite() -> None:
    url = "postgres://u:p%40ss@db.example:6543/app"
    assert database_from_url(url, pool_size=7, pool_timeout=4) == {
        "ENGINE": "chatbridge.records.postgresql",
        "NAME": "app",
        "USER": "u",
        "PASSWORD": "p@ss",
        "HOST": "db.example",
        "PORT": "6543",
        "CONN_MAX_AGE": 0,  # the pool keeps the connections, not the threads
        "CONN_HEALTH_CHECKS": True,  # the pool checks one before handing it out (at most
        "OPTIONS": {"pool": {"min_size": 1, "max_size": 7, "timeout": 4}},  # once a second)
    }
    sqlite = database_from_url("sqlite:////tmp/x.sqlite3")
    assert sqlite["NAME"] == "/tmp/x.sqlite3"
    assert sqlite["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert sqlite["OPTIONS"]["timeout"] == 20
    with pytest.raises(ImproperlyConfigured, match="scheme 'mysql' is not supported"):
        database_from_url("mysql://x/y")


# -- the production server (docs/production.md's commands) ----------------------------------------


def test_foreign_hosts_and_unknown_urls_get_no_debug_pages(production: Production) -> None:
    foreign = request(production.url, "/", headers={"Host": "evil.example"})
    assert foreign.status == 400
    assert "DisallowedHost" not in foreign.body and "Traceback" not in foreign.body
    assert "SECRET_KEY" not in foreign.body
    unknown = request(production.url, "/no/such/page/")
    assert unknown.status == 404
    assert "URLconf" not in unknown.body and "admin/" not in unknown.body


def test_static_files_are_served_hashed_cached_and_compressed(production: Production) -> None:
    _assert_static_files_served(production.url)


def _assert_static_files_served(url: str, headers: dict[str, str] | None = None) -> None:
    """The chat page's assets: hashed names cached for good, gzip, the security headers of a
    page; an unhashed name cached a minute; a missing file is Django's 404."""
    sent = headers or {}
    home = request(url, "/", headers=sent)
    page = request(url, home.headers["Location"], headers={**sent, "Cookie": _cookie(home.headers)})
    assert page.status == 200
    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', page.body)
    names = {a.rsplit("/", 1)[-1] for a in assets}
    for name in ("htmx-2.min", "hx-ws-2.min", "chat", "guest-host"):
        assert any(re.fullmatch(rf"{re.escape(name)}\.[0-9a-f]{{12}}\.(js|css)", n) for n in names)
    for asset in assets:
        reply = request(url, asset, headers={**sent, "Accept-Encoding": "gzip"})
        assert reply.status == 200, asset
        assert "max-age=315360000" in reply.headers["Cache-Control"], asset
        assert "immutable" in reply.headers["Cache-Control"], asset
        assert reply.headers["Content-Encoding"] == "gzip", asset
        assert reply.headers["X-Content-Type-Options"] == "nosniff", asset
        assert reply.headers["Referrer-Policy"] == "same-origin", asset
    plain = request(url, "/static/chatbridge/chat.css", headers=sent)
    assert plain.status == 200 and "prefers-color-scheme" in plain.body
    assert plain.headers["Cache-Control"] == "max-age=60, public"
    missing = request(url, "/static/chatbridge/no-such-file.css", headers=sent)
    assert missing.status == 404 and missing.headers["X-Frame-Options"] == "DENY"


def test_mcp_is_closed_until_the_operator_chooses_who_may_call_it(
    production: Production,
) -> None:
    reply = request(
        production.url,
        "/mcp",
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        body='{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
    )
    assert reply.status == 403
    detail = json.loads(reply.body)["detail"]
    assert "CHATBRIDGE_MCP_TOKEN" in detail and "CHATBRIDGE_MCP_PUBLIC=1" in detail
    assert production.output().count("MCP at /mcp: closed") == 1


@pytest.mark.parametrize(
    ("token", "public", "status"), [("", False, 403), ("t0ken", False, 401), ("t0ken", True, 401)]
)
async def test_the_mcp_policy_is_enforced_before_the_sdk(
    token: str, public: bool, status: int
) -> None:
    manager = SessionManager(sampler=LiteLLMSampler())
    bridge = McpBridge(PluginRegistry(), manager, McpSettings(state_keys=[b"k" * 32]))
    endpoint = McpEndpoint(bridge, allowed_hosts=["127.0.0.1"], token=token, public=public)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    await endpoint({"type": "http", "method": "POST", "path": "/mcp", "headers": []}, receive, send)
    assert sent[0]["status"] == status


async def test_only_a_token_shaped_as_a_users_is_looked_up() -> None:
    """A user's MCP token always starts with its prefix: any other bearer token is never looked
    up (no database read a request), and binds an anonymous caller on an open endpoint."""
    manager = SessionManager(sampler=LiteLLMSampler())
    bridge = McpBridge(PluginRegistry(), manager, McpSettings(state_keys=[b"k" * 32]))
    asked: list[str] = []

    async def check_token(secret: str) -> Caller | None:
        asked.append(secret)
        return None

    endpoint = McpEndpoint(
        bridge,
        allowed_hosts=["127.0.0.1"],
        public=True,
        check_token=check_token,
        user_token_prefix="cbmcp_",
    )
    scope = {"type": "http", "method": "POST", "path": "/mcp", "client": ("127.0.0.1", 5)}
    own = await endpoint.identify({**scope, "headers": [(b"authorization", b"Bearer my-own")]})
    assert own.identity.startswith("bearer:") and asked == []
    with pytest.raises(Refusal) as refused:
        await endpoint.identify({**scope, "headers": [(b"authorization", b"Bearer cbmcp_gone")]})
    assert refused.value.status == 401 and asked == ["cbmcp_gone"]


@pytest.mark.parametrize("size", [64 * 1024 + 1, 16 * 1024 * 1024])
def test_uvicorn_refuses_a_frame_over_64_kib_unread_with_1009_and_a_reason(
    production: Production, size: int
) -> None:
    assert _oversized_frame_close(production.url, size) == (
        1009,
        f"frame with {size} bytes exceeds limit of 65536 bytes",
    )


def test_check_deploy_is_clean_with_the_documented_settings(production: Production) -> None:
    env = {
        **production.env,
        "DJANGO_ALLOWED_HOSTS": "chat.example.com",
        "DJANGO_HTTPS": "1",
        "DJANGO_PROXY_SSL_HEADER": "X-Forwarded-Proto",
        "DJANGO_HSTS_PRELOAD": "1",
        "CHATBRIDGE_MCP_TOKEN": "t0ken",
    }
    result = _manage("check", "--deploy", env=env)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout
    plain = _manage("check", "--deploy", env=production.env)
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in plain.stderr  # what the TLS settings above answer


def test_check_deploy_reports_static_files_not_collected(tmp_path: Path) -> None:
    result = _manage("check", "--deploy", env=production_env(tmp_path))
    assert result.returncode == 1
    assert f"(chatbridge.E001) Static files are not collected in {tmp_path / 'static'}." in (
        result.stderr
    )
    assert "Run `manage.py collectstatic --noinput`" in result.stderr


def test_debug_asked_for_serves_the_apps_static_files_and_debug_pages(tmp_path: Path) -> None:
    env = production_env(tmp_path, DJANGO_DEBUG="1")
    shutil.copyfile(migrated_template(), tmp_path / "db.sqlite3")  # its DATABASE_URL, migrated
    port = free_port()
    proc = start_daphne(port, env, log=tmp_path / "daphne.log")
    try:
        base = f"http://127.0.0.1:{port}"
        assert not (tmp_path / "static").exists()  # nothing collected
        css = request(base, "/static/chatbridge/chat.css")
        assert css.status == 200 and "prefers-color-scheme" in css.body
        assert "URLconf" in request(base, "/no/such/page/").body  # the debug 404
    finally:
        stop(proc)
    assert "MCP at /mcp: open to anyone" in (tmp_path / "daphne.log").read_text()


# -- behind a TLS proxy, on daphne as `make run` starts it -------------------------------------

PROXY = {"Host": "chat.example.com", "X-Forwarded-Proto": "https"}


@pytest.fixture(scope="module")
def behind_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Production]:
    tmp = tmp_path_factory.mktemp("proxy")
    env = production_env(
        tmp,
        DJANGO_ALLOWED_HOSTS="chat.example.com,127.0.0.1",
        DJANGO_HTTPS="1",
        DJANGO_PROXY_SSL_HEADER="X-Forwarded-Proto",
        DJANGO_CSRF_TRUSTED_ORIGINS="https://app.example.com",
    )
    shutil.copyfile(migrated_template(), tmp / "db.sqlite3")  # its DATABASE_URL, migrated
    _manage("collectstatic", "--noinput", "-v0", env=env, check=True)
    port = free_port()
    log = tmp / "daphne.log"
    # The daphne command of `make run`.
    proc = start_daphne(port, env, options=["--websocket-max-message-size", "65536"], log=log)
    try:
        yield Production(f"http://127.0.0.1:{port}", log, proc, env)
    finally:
        stop(proc)


def test_behind_a_tls_proxy_forms_post_and_cookies_are_secure(behind_proxy: Production) -> None:
    home = request(behind_proxy.url, "/", headers=PROXY)
    assert home.status == 302
    assert "max-age=31536000; includeSubDomains" in home.headers["Strict-Transport-Security"]
    cookies = home.headers.get_all("Set-Cookie") or []
    assert cookies and all("Secure" in c for c in cookies)
    session = _cookie(home.headers)
    page = request(behind_proxy.url, home.headers["Location"], headers={**PROXY, "Cookie": session})
    csrf_cookie = _cookie(page.headers, "csrftoken")
    assert "Secure" in " ".join(page.headers.get_all("Set-Cookie") or [])
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.body)
    assert token is not None

    def post(origin: str, headers: dict[str, str] = PROXY) -> int:
        return request(
            behind_proxy.url,
            "/c/new/",
            method="POST",
            headers={
                **headers,
                "Origin": origin,
                "Cookie": f"{session}; {csrf_cookie}",
                "Content-Type": "application/x-www-form-urlencoded",
            },
            body=urlencode({"csrfmiddlewaretoken": token.group(1)}),
        ).status

    assert post("https://chat.example.com") == 302  # a new conversation
    assert post("https://app.example.com") == 302  # DJANGO_CSRF_TRUSTED_ORIGINS
    assert post("https://evil.example") == 403


def test_daphne_serves_static_files_hashed_cached_and_compressed(behind_proxy: Production) -> None:
    _assert_static_files_served(behind_proxy.url, PROXY)


def test_plain_http_is_redirected_to_https(behind_proxy: Production) -> None:
    reply = request(behind_proxy.url, "/tools/", headers={"Host": "chat.example.com"})
    assert reply.status == 301
    assert reply.headers["Location"] == "https://chat.example.com/tools/"


@pytest.mark.parametrize("size", [64 * 1024 + 1, 16 * 1024 * 1024])
def test_daphne_as_make_run_starts_it_refuses_a_frame_over_64_kib_unread_with_1009(
    behind_proxy: Production, size: int
) -> None:
    port = urlsplit(behind_proxy.url).port
    headers = {"Host": f"127.0.0.1:{port}", "X-Forwarded-Proto": "https"}
    # autobahn (daphne's WebSocket layer) would drop the connection without a word: ChatBridge
    # has it close with a close frame instead.
    assert _oversized_frame_close(behind_proxy.url, size, headers) == (
        1009,
        f"received WebSocket message size {size} exceeds payload limit of 65536 octets",
    )
    assert request(behind_proxy.url, "/tools/", headers=PROXY).status == 200


def test_each_log_line_is_printed_once(behind_proxy: Production) -> None:
    # daphne has no lifespan: the runtime starts, and says so, with the first request (this
    # test must not rely on another test of the module having made one).
    request(behind_proxy.url, "/", headers=PROXY)
    output = behind_proxy.output()
    assert output.count("MCP at /mcp: closed") == 1, output


# -- helpers -----------------------------------------------------------------------------------


def _cookie(headers: Message, name: str = "sessionid") -> str:
    for header in headers.get_all("Set-Cookie") or []:
        if header.startswith(f"{name}="):
            return header.split(";", 1)[0]
    raise AssertionError(f"no {name} cookie in {headers.get_all('Set-Cookie')}")


def _manage(
    *args: str, env: dict[str, str], check: bool = False
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=check,
    )


def _oversized_frame_close(
    base: str, size: int, headers: dict[str, str] | None = None
) -> tuple[int, str] | None:
    """Open a chat socket as a browser would, then announce one text frame of ``size`` bytes
    without sending it: the close code and reason the server answers with, having read only
    the header (None: it dropped the connection).

    A raw socket, because a client that sends the whole frame is reset by the closing server
    before it can read the close frame, and because the point is that nothing more is read.
    """
    headers = headers or {}
    home = request(base, "/", headers=headers)
    conversation = home.headers["Location"].strip("/").split("/")[-1]
    parts = urlsplit(base)
    key = base64.b64encode(os.urandom(16)).decode()
    handshake = {
        "Host": parts.netloc,
        **headers,
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": key,
        "Sec-WebSocket-Version": "13",
        "Origin": base,
        "Cookie": _cookie(home.headers),
    }
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        lines = [f"GET /ws/chat/{conversation}/?format=json HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in handshake.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        with sock.makefile("rb") as stream:
            status = stream.readline()
            assert b" 101 " in status, status
            while stream.readline() not in (b"\r\n", b""):
                pass
            opcode, payload = _read_frame(stream)
            assert opcode == 0x1 and json.loads(payload)["type"] == "conversation_state"
            mask = os.urandom(4)
            sock.sendall(bytes([0x81, 0x80 | 127]) + struct.pack("!Q", size) + mask)
            try:
                opcode, payload = _read_frame(stream)
            except (ConnectionResetError, EOFError):
                return None
            assert opcode == 0x8, (opcode, payload)  # a close frame, not an error event first
            return int(struct.unpack("!H", payload[:2])[0]), payload[2:].decode()


def _read_frame(stream: BinaryIO) -> tuple[int, bytes]:
    """One unmasked frame from the server: (opcode, payload)."""
    head = stream.read(2)
    if len(head) < 2:
        raise EOFError("the server closed the connection without a close frame")
    length = head[1] & 0x7F
    if length == 126:
        length = struct.unpack("!H", stream.read(2))[0]
    elif length == 127:
        length = struct.unpack("!Q", stream.read(8))[0]
    return head[0] & 0x0F, stream.read(length)
