"""Where a tool is served (issue 29 point 4): ``.served_on()`` in the builder, and a tool whose
answers an MCP form cannot carry served in the chat only, with a system-check warning naming
the field and the fix — never a failed start."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import override_settings
from mcp import Client
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from chatbridge import (
    PluginRegistry,
    SessionManager,
    ToolContext,
    ToolDefinitionError,
    auto_form,
    create_mcp_tool,
    make_plugin,
)
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.chat.checks import tools_over_mcp
from chatbridge.mcp.server import McpBridge, McpSettings


class Address(BaseModel):
    street: str
    city: str


class Invite(BaseModel):
    name: str
    addresses: list[Address]  # nested: no MCP form carries it


class Seat(BaseModel):
    seat: str


async def ask(params: Any, ctx: ToolContext) -> dict[str, Any]:
    answer = await ctx.elicit("seat", message="Which seat?")
    return {"seat": answer.content.seat if answer.accepted else None}


def plugin_of(name: str, model: type[BaseModel], *served: str) -> Any:
    builder = create_mcp_tool(name).description(f"The {name} tool").elicits(seat=model)
    if served:
        builder = builder.served_on(*served)
    return make_plugin(builder.execute(ask)).on_elicit(seat=auto_form).build()


# Importable by dotted path, as CHATBRIDGE_PLUGINS names plugins.
invite_plugin = plugin_of("invite", Invite)
invite_mcp_only_plugin = plugin_of("invite_mcp", Invite, "mcp")
invite_chat_plugin = plugin_of("invite_chat", Invite, "chat")
seat_plugin = plugin_of("seat", Seat)


def test_a_tool_is_served_on_both_unless_it_says_otherwise() -> None:
    assert seat_plugin.tool.transports == {"chat", "mcp"}
    assert invite_chat_plugin.tool.transports == {"chat"}
    registry = PluginRegistry([seat_plugin, invite_chat_plugin, invite_mcp_only_plugin])
    assert [p.name for p in registry.serving("chat")] == ["seat", "invite_chat"]
    assert [p.name for p in registry.serving("mcp")] == ["seat", "invite_mcp"]


@pytest.mark.parametrize("given", [(), ("email",), ("chat", "web")])
def test_served_on_names_what_it_takes(given: tuple[str, ...]) -> None:
    with pytest.raises(ToolDefinitionError, match=r"\.served_on\(\) takes one or more of 'chat'"):
        create_mcp_tool("t").served_on(*given)


async def test_the_mcp_server_starts_without_the_tools_it_cannot_serve(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The nested answer's tool is left out of MCP (the log says why, naming the field); a
    chat-only tool is not listed; the others are listed and called as ever."""
    registry = PluginRegistry([invite_plugin, invite_chat_plugin, seat_plugin])
    with caplog.at_level(logging.WARNING, logger="chatbridge.mcp"):
        bridge = McpBridge(
            registry,
            SessionManager(sampler=LiteLLMSampler("offline/mcp")),
            McpSettings(state_keys=[b"k" * 32]),
        )
    [said] = [r.getMessage() for r in caplog.records if "invite" in r.getMessage()]
    assert "'addresses'" in said and said.endswith("It is served in the chat only.")

    async def answer(context: Any, params: Any) -> Any:
        import mcp_types as types

        return types.ElicitResult(action="accept", content={"seat": "12C"})

    async with Client(bridge.server, mode="legacy", elicitation_callback=answer) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert "seat" in listed and not {"invite", "invite_chat"} & listed
        result = await client.call_tool("seat", {})
        assert result.structured_content == {"seat": "12C"}
        with pytest.raises(MCPError, match="Unknown tool 'invite'"):
            await client.call_tool("invite", {})


@override_settings(
    CHATBRIDGE_PLUGINS=[
        "tests.test_transports.invite_plugin",
        "tests.test_transports.invite_mcp_only_plugin",
        "tests.test_transports.invite_chat_plugin",
        "tests.test_transports.seat_plugin",
    ]
)
def test_the_system_check_warns_with_the_field_and_the_fix() -> None:
    warnings = tools_over_mcp()
    assert [w.id for w in warnings] == ["chatbridge.W010", "chatbridge.W010"]
    chat_only, nowhere = (w.msg for w in warnings)
    assert chat_only.startswith("Tool 'invite' cannot be served over MCP: the answer to 'seat'")
    assert "'addresses'" in chat_only and chat_only.endswith("It is served in the chat only.")
    assert nowhere.startswith("Tool 'invite_mcp'") and "served nowhere" in nowhere
    assert '.served_on("chat")' in (warnings[0].hint or "")


@override_settings(CHATBRIDGE_PLUGINS=["tests.test_transports.seat_plugin"])
def test_the_system_check_is_quiet_when_every_tool_fits() -> None:
    assert tools_over_mcp() == []
