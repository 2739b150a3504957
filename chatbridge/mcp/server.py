"""The MCP server: every registered tool, served with the official ``mcp`` SDK (lowlevel).

Every call is a ``PluginSession`` of the process's ``SessionManager`` (DESIGN §9): a
``ToolSession`` row, a persisted journal, listed and abortable by operators. Its questions go
where the client can answer them: pushed elicitation (legacy), ``input_required`` round trips
(2026-07-28, see ``rounds``), or request notifications answered through ``_respond``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from chatbridge.core.approval import APPROVAL_KEY, Approval
from chatbridge.core.exceptions import ChatBridgeError
from chatbridge.core.manager import SessionManager
from chatbridge.core.plugins import PluginRegistry
from chatbridge.core.tools import McpTool
from chatbridge.mcp import apps
from chatbridge.mcp.callers import call_meta, identity_of, quota_of
from chatbridge.mcp.cancellation import CLIENT_GONE, Cancellations
from chatbridge.mcp.caps import CallCaps
from chatbridge.mcp.errors import public_error
from chatbridge.mcp.extensions import install
from chatbridge.mcp.flat import flat_schema
from chatbridge.mcp.hosts import (
    Ask,
    Channel,
    ClientGone,
    PushCarrier,
    drive,
)
from chatbridge.mcp.levels import hears, set_level
from chatbridge.mcp.modes import REFUSED_BY, ModeNotDeclared
from chatbridge.mcp.respond import (
    RESPOND_SCHEMA,
    RESPOND_TOOL,
    NotifyCarrier,
    PendingRequests,
    respond_tool,
)
from chatbridge.mcp.results import CallStore, error_of, result_of, terminal_result
from chatbridge.mcp.rounds import Rounds, RoundState
from chatbridge.mcp.task_cluster import TaskCluster
from chatbridge.mcp.tasks import Tasks
from chatbridge.mcp.urls import request_origin

__all__ = ["MCP_APP_MIME", "RESPOND_TOOL", "McpBridge", "McpSettings"]

logger = logging.getLogger("chatbridge.mcp")

RESOURCE_NOT_FOUND = -32002  # server/resources up to 2025-11-25; mcp_types has no name for it
NO_WAY_TO_ASK = (
    "Tool {tool!r} asks the user questions, and this client can receive none: it declared no "
    "elicitation capability and its logging level hides the notices questions travel as. "
    "Either declare the elicitation capability, or receive log notifications at level "
    "'notice' (logging/setLevel on protocols up to 2025-11-25; on 2026-07-28 call again with "
    '_meta {{"io.modelcontextprotocol/logLevel": "notice"}}): each question then arrives as a '
    "notifications/message of type 'request', answered by calling the {respond!r} tool with "
    "its request_id and payload."
)


MCP_APP_MIME = "text/html;profile=mcp-app"
UiRenderer = Callable[[str], str]  # ui:// URI → the guest page's HTML


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


def _header(ctx: ServerRequestContext[Any, Any], name: str) -> str:
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    return str(headers.get(name, "")) if headers is not None else ""


def _mcp_session(ctx: ServerRequestContext[Any, Any]) -> str:
    """The MCP session (``Mcp-Session-Id``) the request belongs to; empty when stateless."""
    return _header(ctx, "mcp-session-id")


def _can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared elicitation: for its session (legacy), or in this very
    request (2026-07-28, where each request declares its capabilities)."""
    caps = ctx.session.client_capabilities
    return caps is not None and caps.elicitation is not None


def _questions(tool: McpTool[Any, Any]) -> dict[str, type[BaseModel]]:
    """Every question a call of ``tool`` may ask: its keys, and the approval if it needs one."""
    approval = {APPROVAL_KEY: Approval} if tool.needs_approval else {}
    return {**approval, **tool.elicits}


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
        self.tools: dict[str, McpTool[Any, Any]] = {p.name: p.mcp for p in registry}
        # Guest UIs (seed 004) as MCP Apps resources, linked from their tools' _meta.ui.
        self.ui_of_tool = {p.name: next(iter(p.ui_resources)) for p in registry if p.ui_resources}
        self.ui_uris = sorted({uri for p in registry for uri in p.ui_resources})
        self.render_ui = render_ui
        # Refuse models MCP forms cannot carry now, not on the first call.
        self.flat = {
            name: {key: flat_schema(name, key, model) for key, model in _questions(tool).items()}
            for name, tool in self.tools.items()
        }
        self.manager, self.settings = manager, settings
        self.pending = PendingRequests()
        self.rounds = Rounds(
            manager, self.flat, settings.state_ttl, store, url_wait=settings.url_wait
        )
        self._cancelled = Cancellations()  # calls whose request ended: aborted, or told
        self.caps = CallCaps(settings.max_calls_per_caller)
        self.server: Server[Any] = Server(
            settings.name,
            version="1.0",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
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

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        with_apps = bool(self.ui_uris) and apps.supports_apps(ctx)  # else the text-only variant
        listed = [
            types.Tool(
                name=t.name,
                description=t.description,
                input_schema=t.parameters_schema,
                annotations=types.ToolAnnotations(**_hint_fields(t.hints.declared()))
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

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=uri,
                    name=uri.removeprefix("ui://"),
                    mime_type=MCP_APP_MIME,
                    _meta={"ui": apps.RESOURCE_UI_META},
                )
                for uri in self.ui_uris
            ]
        )

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        """None: every resource is listed by its URI. Served because a server that declares
        ``resources`` answers ``resources/templates/list`` too (required on 2026-07-28)."""
        return types.ListResourceTemplatesResult(resource_templates=[])

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri not in self.ui_uris or self.render_ui is None:
            # -32002 up to 2025-11-25 (server/resources, error handling); SEP-2164 moved
            # 2026-07-28 to -32602 and retired -32002. Both carry the URI in data.
            modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
            code = types.INVALID_PARAMS if modern else RESOURCE_NOT_FOUND
            raise MCPError(code, f"No resource {uri!r}.", data={"uri": uri})
        html = self.render_ui(uri)
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=uri, mime_type=MCP_APP_MIME, text=html, _meta={"ui": apps.RESOURCE_UI_META}
                )
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if params.name == RESPOND_TOOL:
            return await self._respond(ctx, params.arguments or {})
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
            if can_elicit and modern:
                return await self._round(ctx, tool, arguments, params, call_id)
            asks = bool(tool.elicits) or tool.needs_approval
            if not can_elicit and asks and not hears(ctx, "notice"):
                return error_of(NO_WAY_TO_ASK.format(tool=tool.name, respond=RESPOND_TOOL))
            return await self._run(ctx, tool, arguments, call_id, push=can_elicit)
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
        return _mcp_session(ctx) or identity_of(ctx)

    async def _run(
        self,
        ctx: ServerRequestContext[Any, Any],
        tool: McpTool[Any, Any],
        arguments: dict[str, Any],
        call_id: str,
        *,
        push: bool,
    ) -> types.CallToolResult:
        """A call held open for its whole run: pushed questions, or ``_respond`` requests."""
        meta = {
            **call_meta(ctx),
            "transport": "mcp-push" if push else "mcp-respond",
            "client": self._client(ctx),
            "origin": request_origin(ctx),
            "caller": identity_of(ctx),
            "rpc_id": str(ctx.request_id),  # hostContext.toolInfo.id of an app showing the call
        }
        session = await self.manager.create(tool, arguments, call_id=call_id, meta=meta)
        channel = Channel(ctx)
        ask: Ask
        if push:
            ask = PushCarrier(
                ctx,
                self.flat[tool.name],
                self.settings.request_timeout,
                session,
                self.settings.heartbeat,
            )
        else:
            ask = NotifyCarrier(
                channel,
                self.flat[tool.name],
                self.pending,
                self.settings.request_timeout,
                session,
                _mcp_session(ctx),
                identity_of(ctx),
            )
        completed = ask.completed if isinstance(ask, PushCarrier) else None
        try:
            event = await drive(session, channel, ask, completed)
        except ModeNotDeclared as exc:
            await session.abort(str(exc), by=REFUSED_BY)
            await session.wait_finished()
            return error_of(str(exc))
        except ClientGone as exc:
            logger.info("MCP call %s: the client went away (%s)", session.id, exc)
            await session.abort(CLIENT_GONE)
            event = await session.wait_finished()
        except BaseException:  # the request was cancelled, or its session ended
            self._cancelled.abort_later(session, ctx)
            raise
        return terminal_result(session, event)

    async def _round(
        self,
        ctx: ServerRequestContext[Any, Any],
        tool: McpTool[Any, Any],
        arguments: dict[str, Any],
        params: types.CallToolRequestParams,
        call_id: str,
    ) -> types.CallToolResult | types.InputRequiredResult:
        caller = identity_of(ctx)
        meta = {
            **call_meta(ctx),
            "transport": "mcp-mrtr",
            "client": self._client(ctx),
            "origin": request_origin(ctx),
        }
        channel = Channel(ctx)
        if params.request_state is None:
            return await self.rounds.start(tool, arguments, call_id, caller, channel, meta)
        try:
            state = RoundState.parse(params.request_state)
        except ValueError:
            raise MCPError(types.INVALID_PARAMS, "Invalid requestState.") from None
        if state.caller != caller:
            raise MCPError(types.INVALID_PARAMS, "This requestState belongs to another caller.")
        if not state.call_id.startswith("mcp_") or not state.elicit_id.startswith(f"{tool.name}:"):
            raise MCPError(types.INVALID_PARAMS, "This requestState belongs to another tool.")
        responses = dict(params.input_responses or {})
        return await self.rounds.retry(tool, arguments, state, responses, channel, meta)

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

    async def _respond(
        self, ctx: ServerRequestContext[Any, Any], arguments: dict[str, Any]
    ) -> types.CallToolResult:
        request_id = arguments.get("request_id")
        if not isinstance(request_id, str):
            raise MCPError(types.INVALID_PARAMS, "_respond needs a string request_id.")
        try:
            note = await self.pending.respond(
                request_id, arguments.get("payload"), _mcp_session(ctx), identity_of(ctx)
            )
        except KeyError:
            raise MCPError(
                types.INVALID_PARAMS,
                f"No open request {request_id!r}: unknown, answered or timed out.",
            ) from None
        if note:
            return error_of(note)
        return result_of({"ok": True, "request_id": request_id})
