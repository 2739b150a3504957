"""The MCP server: every registered tool, served with the official ``mcp`` SDK (lowlevel).

Every call is a ``PluginSession`` of the process's ``SessionManager`` (DESIGN §9): a
``ToolSession`` row, a persisted journal, listed and abortable by operators. Its questions go
where the client can answer them: pushed elicitation (legacy), ``input_required`` round trips
(2026-07-28, see ``rounds``), or request notifications answered through ``_respond``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

import chatbridge
from chatbridge.author.exceptions import ChatBridgeError, ToolDefinitionError
from chatbridge.author.plugins import PluginRegistry
from chatbridge.author.tools import McpTool
from chatbridge.calls.manager import SessionManager
from chatbridge.mcp import apps
from chatbridge.mcp.app_resources import MCP_APP_MIME, AppResources, UiRenderer
from chatbridge.mcp.callers import identity_of, quota_of
from chatbridge.mcp.caps import CallCaps
from chatbridge.mcp.errors import public_error
from chatbridge.mcp.extensions import install
from chatbridge.mcp.flat import flat_schemas
from chatbridge.mcp.held_calls import HeldCalls, mcp_session_of
from chatbridge.mcp.hosts import RoutedChannel
from chatbridge.mcp.levels import set_level
from chatbridge.mcp.respond import RESPOND_SCHEMA, RESPOND_TOOL, PendingRequests, respond_tool
from chatbridge.mcp.results import CallStore, error_of
from chatbridge.mcp.round_routing import Routed, served
from chatbridge.mcp.rounds import Rounds
from chatbridge.mcp.task_cluster import TaskCluster
from chatbridge.mcp.tasks import Tasks

__all__ = ["MCP_APP_MIME", "RESPOND_TOOL", "McpBridge", "McpSettings"]

logger = logging.getLogger("chatbridge.mcp")


@dataclass(frozen=True)
class McpSettings:
    """How the MCP server seals state and waits for answers."""

    state_keys: Sequence[bytes]  # the first seals, all unseal (rotation)
    state_ttl: float = 900.0
    request_timeout: float = 120.0
    heartbeat: float = 5.0  # seconds between pings of a client that is being asked
    url_wait: float = 20.0  # a 2026-07-28 retry waits this long for a URL question's page
    name: str = "chatbridge"
    max_calls_per_caller: int | None = None  # tool calls live at once per caller (caps.py)


def _can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared elicitation: for its session (legacy), or in this very
    request (2026-07-28, where each request declares its capabilities)."""
    caps = ctx.session.client_capabilities
    return caps is not None and caps.elicitation is not None


def _hint_fields(hints: dict[str, bool]) -> dict[str, bool]:
    """``ToolHints`` names → MCP ``ToolAnnotations`` field names."""
    return {f"{name}_hint": value for name, value in hints.items()}


class McpBridge:
    """Builds and holds the lowlevel MCP ``Server`` for a plugin registry."""

    def __init__(
        self,
        registry: PluginRegistry,
        manager: SessionManager,
        settings: McpSettings,
        render_ui: UiRenderer | None = None,
        *,
        store: CallStore | None = None,
        cluster: TaskCluster | None = None,
    ) -> None:
        """``manager`` runs every call; ``store`` finds persisted calls after a restart;
        ``cluster`` lets tasks be served by any worker and survive a restart."""
        # The tools served over MCP whose questions an MCP form can carry, each question's
        # form schema drawn now, not on the first call. The others are served in the chat
        # only: said in the log here and by the system check (chatbridge.W010), never a
        # failed start (the chat serves them).
        self.flat: dict[str, dict[str, dict[str, Any]]] = {}
        for plugin in registry.serving("mcp"):
            try:
                self.flat[plugin.name] = flat_schemas(plugin.mcp)
            except ToolDefinitionError as exc:
                logger.warning("%s It is served in the chat only.", exc)
        served = [p for p in registry if p.name in self.flat]
        self.tools: dict[str, McpTool[Any, Any]] = {p.name: p.mcp for p in served}
        # Guest UIs (seed 004) as MCP Apps resources, linked from their tools' _meta.ui.
        self.ui_of_tool = {p.name: next(iter(p.ui_resources)) for p in served if p.ui_resources}
        self.ui_uris = sorted({uri for p in served for uri in p.ui_resources})
        self.render_ui = render_ui
        self.manager, self.settings = manager, settings
        self.pending = PendingRequests()
        self.rounds = Rounds(
            manager, self.flat, settings.state_ttl, store, url_wait=settings.url_wait
        )
        self.held = HeldCalls(
            manager, self.flat, self.pending, settings.request_timeout, settings.heartbeat
        )
        self.resources = AppResources(self.ui_uris, render_ui)
        self.caps = CallCaps(settings.max_calls_per_caller)
        self.server: Server[Any] = Server(
            settings.name,
            version=chatbridge.__version__,  # the installed distribution's version
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self.resources.list,
            on_list_resource_templates=self.resources.list_templates,
            on_read_resource=self.resources.read,
            get_tool_input_schema=self._input_schema,
        )
        security = RequestStateSecurity(keys=list(settings.state_keys), ttl=settings.state_ttl)
        self.server.middleware.append(
            RequestStateBoundary(security, default_audience=settings.name)
        )
        # Registered after construction: the constructor's on_set_logging_level warns that
        # logging is deprecated on 2026-07-28, where the SDK refuses the method anyway.
        self.server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
        self.tasks = Tasks(
            manager,
            self.tools,
            self.rounds,
            settings.state_keys,
            settings.state_ttl,
            caller=identity_of,
            client=self._client,
            cluster=cluster,
            admit=lambda ctx: self.caps.admit(quota_of(ctx)),
        )
        install(self.server, self.tasks, self._call_tool)
        if self.ui_uris:  # MCP Apps (mcp/apps.py): what clients that negotiate it see
            self.server.extensions[apps.EXTENSION_ID] = {}

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        if name == RESPOND_TOOL:
            return RESPOND_SCHEMA
        if name in apps.APP_TOOLS and self.ui_uris:
            return apps.input_schema(name)
        tool = self.tools.get(name)
        return tool.parameters_schema if tool else None

    async def serve_routed_round(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """A 2026-07-28 retry another worker received for a call held here
        (``mcp/round_routing.py``): served as if received here; the reply to send back."""
        routed = Routed.model_validate(message)
        tool = self.tools.get(routed.tool)
        if tool is None:
            return served(MCPError(types.INVALID_PARAMS, f"Unknown tool {routed.tool!r}."))
        channel = RoutedChannel(frozenset(routed.modes))
        arguments, state, answers = routed.arguments, routed.state, routed.responses
        try:
            outcome = await self.rounds.retry(
                tool, arguments, state, answers, channel, routed.meta, routed=True
            )
        except MCPError as exc:
            return served(exc)
        except Exception as exc:  # as a call received here: the caller's error result
            if not isinstance(exc, ChatBridgeError):
                logger.exception("routed MCP retry of %s failed", tool.name)
            return served(error_of(public_error(exc)))
        return served(outcome)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        with_apps = bool(self.ui_uris) and apps.supports_apps(ctx)  # else the text-only variant
        listed = [
            types.Tool(
                name=t.name,
                description=t.description,
                input_schema=t.parameters_schema,
                annotations=types.ToolAnnotations.model_validate(_hint_fields(t.hints.declared()))
                if t.hints.declared()
                else None,
                _meta={
                    "ui": {"resourceUri": self.ui_of_tool[t.name], "visibility": ["model", "app"]}
                }
                if with_apps and t.name in self.ui_of_tool
                else None,
            )
            for t in self.tools.values()
        ]
        if not _can_elicit(ctx):
            # Only a client that cannot elicit is sent request notifications; to others the
            # tool is noise a model may call. A call to it is served whoever lists it.
            listed.append(respond_tool())
        if with_apps:  # the app-only tools through which a guest UI answers (mcp/apps.py)
            listed.extend(apps.app_tools(self.ui_uris[0]))
        return types.ListToolsResult(tools=listed)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if params.name == RESPOND_TOOL:
            return await self.held.respond(ctx, params.arguments or {})
        if params.name in apps.APP_TOOLS and self.ui_uris:
            return await self._app_tool(ctx, params.name, params.arguments or {})
        tool = self.tools.get(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool {params.name!r}.")
        arguments = dict(params.arguments or {})
        can_elicit = _can_elicit(ctx)
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        retry = can_elicit and modern and params.request_state is not None
        # A new call takes a place under its caller's cap until it ends; a retry has one.
        ticket = None if retry else self.caps.admit(quota_of(ctx))
        call_id = f"mcp_{uuid.uuid4().hex}"
        try:
            client = self._client(ctx)
            if can_elicit and modern:
                return await self.rounds.call(ctx, tool, arguments, params, call_id, client)
            return await self.held.run(
                ctx, tool, arguments, call_id, push=can_elicit, client=client
            )
        except MCPError:
            raise
        except Exception as exc:  # a tool bug is the caller's error result, not a server crash
            if not isinstance(exc, ChatBridgeError):
                logger.exception("MCP call of %s failed", tool.name)
            return error_of(public_error(exc))
        finally:
            if ticket is not None:
                ticket.follow(self.manager.get(call_id))

    def _client(self, ctx: ServerRequestContext[Any, Any]) -> str:
        return mcp_session_of(ctx) or identity_of(ctx)

    async def _app_tool(
        self, ctx: ServerRequestContext[Any, Any], name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """``_ui_question``/``_ui_answer`` of a guest UI shown by an MCP Apps host."""
        apps.require_apps(ctx, name)
        sessions = [self.manager.get(info.id) for info in self.manager.list_active()]
        client, caller = self._client(ctx), identity_of(ctx)
        if name == apps.QUESTION_TOOL:
            return apps.question(sessions, client, caller, arguments, self.flat)
        return await apps.answer(sessions, client, caller, arguments)
