"""The colour picker in a standard MCP Apps host: the official ``AppBridge`` of
``@modelcontextprotocol/ext-apps`` (pinned in tests/clients/package.json, installed by
`make npm-clients`, bundled for the browser by esbuild) drives the page served by
``resources/read`` over MCP."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from playwright.async_api import Browser, expect

from tests.mcp_results import text_of
from tests.npm_clients import CLIENTS, MODULES, node
from tests.test_mcp import apps_host

HOST_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Test host</title></head>
<body><iframe id="app" sandbox="allow-scripts" title="App"
  style="width: 480px; height: 520px; border: 1px solid #999"></iframe></body></html>"""

# The host: the View's tools/call goes to the MCP server through the test's MCP client (the
# same MCP session as the call it shows); the call's arguments follow the View's initialized.
START_HOST = """async ({html, tool, args}) => {
  const {AppBridge, PostMessageTransport} = ExtApps;
  const frame = document.getElementById("app");
  const bridge = new AppBridge(null, {name: "test-host", version: "1.0.0"}, {serverTools: {}},
    {hostContext: {theme: "light", displayMode: "inline", platform: "web", toolInfo: {tool}}});
  bridge.oncalltool = (params) => window.serverCall(params.name, params.arguments || {});
  bridge.oninitialized = () => { bridge.sendToolInput({arguments: args}); };
  window.bridge = bridge;
  await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
  frame.srcdoc = html;
}"""


@pytest.fixture(scope="session")
def app_bridge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The AppBridge browser bundle, built by the pinned esbuild of tests/clients."""
    node()  # fails the test, saying what to run, when the npm clients are not installed
    out = tmp_path_factory.mktemp("apps-host") / "bridge.js"
    subprocess.run(
        [
            str(MODULES / ".bin" / "esbuild"),
            "host-entry.js",
            "--bundle",
            "--format=iife",
            "--global-name=ExtApps",
            "--platform=browser",
            f"--outfile={out}",
            "--log-level=error",
        ],
        cwd=CLIENTS,
        check=True,
        timeout=120,
    )
    return out


async def test_a_standard_mcp_apps_host_drives_the_picker(
    browser: Browser, server: str, app_bridge: Path
) -> None:
    asked = asyncio.Event()  # the question is open: the View will find it

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            asked.set()

    # The host negotiates MCP Apps: only then are _meta.ui and the app-only tools shown.
    async with Client(
        f"{server}/mcp", mode="legacy", extensions=apps_host(), logging_callback=on_log
    ) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        uri = tools["choose_color"].meta["ui"]["resourceUri"]
        [resource] = (await client.read_resource(uri)).contents
        assert resource.mime_type == "text/html;profile=mcp-app"

        async def server_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, arguments)
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        page = await browser.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        await page.set_content(HOST_PAGE)
        await page.add_script_tag(path=app_bridge)
        await page.expose_function("serverCall", server_call)
        arguments = {"default_color": "#a855f7", "theme": "dark"}
        call = asyncio.create_task(client.call_tool("choose_color", arguments))
        await asyncio.wait_for(asked.wait(), 15)
        tool = tools["choose_color"].model_dump(mode="json", by_alias=True, exclude_none=True)
        await page.evaluate(
            START_HOST, {"html": text_of(resource), "tool": tool, "args": arguments}
        )

        app = page.frame_locator("#app")
        # The question from the server, the default colour and theme from the call's arguments.
        await expect(app.locator("#message")).to_have_text(
            "Please select a color for your theme", timeout=15000
        )
        await expect(app.get_by_label("Custom colour (hex)")).to_have_value("#a855f7")
        await expect(app.locator("body")).to_have_class("dark")

        await app.get_by_label("Custom colour (hex)").fill("#zzz")
        await app.get_by_role("button", name="Choose").click()
        await expect(app.get_by_role("alert")).to_have_text(
            "Your previous answer was not accepted. Color: Enter a colour as # and six hex "
            "digits, like #1a2b3c. Please try again.",
            timeout=15000,
        )
        assert not call.done()  # the refused answer never reached the tool

        await app.get_by_label("Custom colour (hex)").fill("#12AB34")
        await app.get_by_role("button", name="Choose").click()
        result = await asyncio.wait_for(call, 15)
        assert result.structured_content == {"chosen": True, "color": "#12ab34", "name": None}
        done = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        await page.evaluate("(result) => window.bridge.sendToolResult(result)", done)
        await expect(app.get_by_role("status")).to_have_text("Chosen colour #12ab34")
    # The View speaks MCP Apps exactly as ext-apps defines it: the host parsed every message.
    assert [line for line in console if line.startswith("error")] == []
