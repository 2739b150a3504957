"""ChatBridge in a project that is not this repository: the wheel is built, installed into a
fresh virtual environment, a new Django project is generated and set up by the blocks of
``docs/install.md``, and its tool's question is answered in chromium and over MCP."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.async_api import Browser, expect

from tests.servers import ROOT, free_port, stop, wait_for_port

# Building the wheel and a fresh virtual environment takes seconds idle, a minute under load
# (the fixture's setup counts against the timeout).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GUIDE = ROOT / "docs" / "install.md"
TOKEN = "outside-project-token"
# A marked block: "<!-- file: PATH, ACTION -->" and the fenced block right after it.
BLOCK = re.compile(r"<!-- file: (\S+), (append|replace|create) -->\n```python\n(.*?)```", re.S)


def guide_blocks() -> list[tuple[str, str, str]]:
    return [(m[1], m[2], m[3]) for m in BLOCK.finditer(GUIDE.read_text())]


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A new project served by uvicorn from its own virtual environment; its base URL."""
    tmp = tmp_path_factory.mktemp("outside")
    dist, venv, home = tmp / "dist", tmp / "venv", tmp / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), "."], ROOT)
    [wheel] = dist.glob("django_chatbridge-*.whl")
    # The environment and its packages by uv's pip interface: the same resolution from the
    # wheel's metadata as pip's (the guide's command), from uv's cache in seconds rather than
    # pip's forty of CPU. The environment has no pip: nothing in it is used but the install.
    uv = str(Path(sys.executable).with_name("uv"))
    run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], tmp)
    bin_ = venv / "bin"
    install = [uv, "pip", "install", "--quiet", "--python", str(bin_ / "python")]
    # By its name, as the guide says: this build first (never the index's), then its extra
    # and dependencies, at the versions tested.
    run([*install, "--no-deps", "--no-index", "--find-links", str(dist), "django-chatbridge"], tmp)
    guide = GUIDE.read_text()
    assert 'pip install "django-chatbridge[production]"' in guide
    run([*install, "django-chatbridge[production]", "-c", str(ROOT / "requirements-app.txt")], tmp)
    home.mkdir()
    run([str(bin_ / "django-admin"), "startproject", "mysite", str(home)], tmp)

    blocks = guide_blocks()
    assert [(path, action) for path, action, _ in blocks] == [
        ("mysite/settings.py", "append"),
        ("mysite/tools.py", "create"),
        ("mysite/urls.py", "replace"),
        ("mysite/asgi.py", "replace"),
    ]
    for path, action, text in blocks:
        target = home / path
        assert target.exists() == (action != "create"), path
        target.write_text(target.read_text() + "\n" + text if action == "append" else text)

    # Nothing of this checkout may be importable: only the installed package.
    env = {"PATH": f"{bin_}:{os.environ['PATH']}", "HOME": str(tmp), "CHATBRIDGE_MCP_TOKEN": TOKEN}
    python = str(bin_ / "python")
    where = run([python, "-c", "import chatbridge; print(chatbridge.__file__)"], home, env)
    assert where.startswith(str(venv)), where
    version = run([python, "-c", "import chatbridge; print(chatbridge.__version__)"], home, env)
    assert version.strip() == wheel.name.split("-")[1]
    assert "System check identified no issues" in run([python, "manage.py", "check"], home, env)
    run([python, "manage.py", "migrate", "--noinput", "-v0"], home, env)

    port = free_port()
    log = (tmp / "uvicorn.log").open("wb")
    server = subprocess.Popen(
        [str(bin_ / "uvicorn"), "mysite.asgi:application", "--lifespan", "on"]
        + ["--host", "127.0.0.1", "--port", str(port)],
        cwd=home,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    try:
        wait_for_port(port, server, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(server)


def test_the_install_guide_has_one_block_per_step() -> None:
    assert len(guide_blocks()) == 4


async def test_a_person_answers_the_tool_in_the_browser(site: str, browser: Browser) -> None:
    page = await browser.new_page()
    response = await page.goto(site + "/assistant/")  # a new chat, which offers the tool's example
    assert response is not None  # the chat's own policy, with the guide's middleware
    assert "script-src 'self'" in (await response.all_headers())["content-security-policy"]
    await expect(page.get_by_role("status").filter(has_text="Connected")).to_be_visible()
    await page.get_by_role("button", name="Please greet me").click()
    name = page.get_by_role("textbox", name="Your name")
    await expect(name).to_be_visible(timeout=20000)
    await name.fill("Ada")
    await name.press("Enter")
    await expect(page.get_by_text("Hello, Ada!").first).to_be_visible(timeout=20000)
    await page.close()


async def test_an_mcp_client_answers_the_tool(site: str) -> None:
    asked: list[dict[str, Any]] = []

    async def person(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.requested_schema)
        return types.ElicitResult(action="accept", content={"name": "Grace"})

    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(f"{site}/mcp", http_client=http)
        async with Client(transport, mode="legacy", elicitation_callback=person) as client:
            tools = await client.list_tools()
            assert "greet" in [tool.name for tool in tools.tools]
            result = await client.call_tool("greet", {"greeting": "Welcome"})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["greeting"] == "Welcome, Grace!"
    assert asked[0]["properties"]["name"]["title"] == "Your name"


async def test_mcp_without_the_token_is_refused(site: str) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.post(f"{site}/mcp", json={})
    assert response.status_code == 401
