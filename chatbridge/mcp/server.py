"""The MCP server: every registered tool, served with the official ``mcp`` SDK (lowlevel).

One tool call picks its host by what the client can do: pushed elicitation (legacy), replay
over ``input_required`` (2026-07-28), or request notifications answered through ``_respond``
(clients without elicitation). ``sample`` runs server-side with the configured model.
"""

from __future__ import annotations

import hashlib
import json
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

from chatbridge.core.calls import run_call
from chatbridge.core.exceptions import ChatBridgeError, ElicitValidationError
from chatbridge.core.journal import Journal
from chatbridge.core.plugins import PluginRegistry
from chatbridge.core.sampling import Sampler
from chatbridge.core.tools import McpTool
from chatbridge.mcp.flat import flat_schema
from chatbridge.mcp.hosts import (
    InputRequired,
    NotifyHost,
    PendingRequests,
    PushHost,
    ReplayHost,
    wire_request,
)

__all__ = ["MCP_APP_MIME", "RESPOND_TOOL", "McpBridge", "McpSettings"]

logger = logging.getLogger("chatbridge.mcp")

RESPOND_TOOL = "_respond"
_RESPOND_SCHEMA = {
    "type": "object",
    "properties": {
        "request_id": {
            "type": "string",
            "description": "The request_id of the request notification",
        },
        "payload": {"description": "The answer: an object matching the request's schema"},
    },
    "required": ["request_id", "payload"],
}


MCP_APP_MIME = "text/html;profile=mcp-app"
UiRenderer = Callable[[str], str]  # ui:// URI → the guest page's HTML


@dataclass(frozen=True)
class McpSettings:
    """How the MCP server seals state and waits for answers."""

    state_keys: Sequence[bytes]  # the first seals, all unseal (rotation)
    state_ttl: float = 900.0
    request_timeout: float = 120.0
    name: str = "chatbridge"


def _caller(ctx: ServerRequestContext[Any, Any]) -> str:
    """Who is calling: a digest of the Authorization header (empty without one)."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    auth = headers.get("authorization", "") if headers is not None else ""
    return hashlib.sha256(auth.encode()).hexdigest()[:32] if auth else ""


def _result(value: Any) -> types.CallToolResult:
    structured = value if isinstance(value, dict) else {"result": value}
    text = json.dumps(value, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


class McpBridge:
    """Builds and holds the lowlevel MCP ``Server`` for a plugin registry."""

    def __init__(
        self,
        registry: PluginRegistry,
        sampler: Sampler,
        settings: McpSettings,
        render_ui: UiRenderer | None = None,
    ) -> None:
        self.tools: dict[str, McpTool[Any, Any]] = {p.name: p.mcp for p in registry}
        # Guest UIs (seed 004) as MCP Apps resources, linked from their tools' _meta.ui.
        self.ui_of_tool = {p.name: next(iter(p.ui_resources)) for p in registry if p.ui_resources}
        self.ui_uris = sorted({uri for p in registry for uri in p.ui_resources})
        self.render_ui = render_ui
        # Refuse models MCP forms cannot carry now, not on the first call.
        self.flat = {
            name: {key: flat_schema(name, key, model) for key, model in tool.elicits.items()}
            for name, tool in self.tools.items()
        }
        self.sampler, self.settings = sampler, settings
        self.pending = PendingRequests()
        self.server: Server[Any] = Server(
            settings.name,
            version="1.0",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            get_tool_input_schema=self._input_schema,
        )
        security = RequestStateSecurity(keys=list(settings.state_keys), ttl=settings.state_ttl)
        self.server.middleware.append(
            RequestStateBoundary(security, default_audience=settings.name)
        )

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        if name == RESPOND_TOOL:
            return _RESPOND_SCHEMA
        tool = self.tools.get(name)
        return tool.parameters_schema if tool else None

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listed = [
            types.Tool(
                name=t.name,
                description=t.description,
                input_schema=t.parameters_schema,
                _meta={"ui": {"resourceUri": self.ui_of_tool[t.name]}}
                if t.name in self.ui_of_tool
                else None,
            )
            for t in self.tools.values()
        ]
        listed.append(
            types.Tool(
                name=RESPOND_TOOL,
                description="Answer a request notification (type 'request') of a running tool.",
                input_schema=_RESPOND_SCHEMA,
            )
        )
        return types.ListToolsResult(tools=listed)

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=uri, name=uri.removeprefix("ui://"), mime_type=MCP_APP_MIME)
                for uri in self.ui_uris
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri not in self.ui_uris or self.render_ui is None:
            raise MCPError(types.INVALID_PARAMS, f"No resource {uri!r}.")
        html = self.render_ui(uri)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=MCP_APP_MIME, text=html)]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if params.name == RESPOND_TOOL:
            return self._respond(ctx, params.arguments or {})
        tool = self.tools.get(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool {params.name!r}.")
        arguments = dict(params.arguments or {})
        caps = ctx.session.client_capabilities
        can_elicit = caps is not None and caps.elicitation is not None
        try:
            if not can_elicit:
                host = NotifyHost(
                    ctx,
                    self.flat[tool.name],
                    self.sampler,
                    self.pending,
                    self.settings.request_timeout,
                    _caller(ctx),
                )
                return _result(
                    await run_call(tool, arguments, call_id=f"mcp_{uuid.uuid4().hex}", host=host)
                )
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                return await self._replay(ctx, tool, arguments, params)
            push = PushHost(ctx, self.flat[tool.name], self.sampler)
            return _result(
                await run_call(tool, arguments, call_id=f"mcp_{uuid.uuid4().hex}", host=push)
            )
        except MCPError:
            raise
        except ChatBridgeError as exc:
            return _error(str(exc))
        except Exception as exc:  # a tool bug is the caller's error result, not a server crash
            logger.exception("MCP call of %s failed", tool.name)
            return _error(f"The tool failed: {type(exc).__name__}: {exc}")

    async def _replay(
        self,
        ctx: ServerRequestContext[Any, Any],
        tool: McpTool[Any, Any],
        arguments: dict[str, Any],
        params: types.CallToolRequestParams,
    ) -> types.CallToolResult | types.InputRequiredResult:
        state = self._load_state(ctx, tool, params.request_state)
        responses = dict(params.input_responses or {})
        journal = Journal(tool.name, state["journal"])
        host = ReplayHost(ctx, self.flat[tool.name], self.sampler, responses, state["attempts"])
        try:
            value = await run_call(
                tool, arguments, call_id=state["call_id"], host=host, journal=journal
            )
        except InputRequired as stop:
            request = stop.request
            new_state = {
                "call_id": state["call_id"],
                "journal": journal.to_list(),
                "attempts": stop.attempts,
                "caller": _caller(ctx),
            }
            return types.InputRequiredResult(
                input_requests={
                    str(request.id): types.ElicitRequest(
                        params=wire_request(request, self.flat[tool.name][request.key], stop.note)
                    )
                },
                request_state=json.dumps(new_state, separators=(",", ":")),
            )
        return _result(value)

    def _load_state(
        self, ctx: ServerRequestContext[Any, Any], tool: McpTool[Any, Any], raw: str | None
    ) -> dict[str, Any]:
        if raw is None:
            return {"call_id": f"mcp_{uuid.uuid4().hex}", "journal": [], "attempts": 0}
        try:
            state = json.loads(raw)
        except ValueError:
            raise MCPError(types.INVALID_PARAMS, "Invalid requestState.") from None
        if not isinstance(state, dict) or state.get("caller", "") != _caller(ctx):
            raise MCPError(types.INVALID_PARAMS, "This requestState belongs to another caller.")
        return dict(state)

    def _respond(
        self, ctx: ServerRequestContext[Any, Any], arguments: dict[str, Any]
    ) -> types.CallToolResult:
        request_id = arguments.get("request_id")
        if not isinstance(request_id, str):
            raise MCPError(types.INVALID_PARAMS, "_respond needs a string request_id.")
        try:
            result = self.pending.respond(request_id, arguments.get("payload"), _caller(ctx))
        except KeyError:
            raise MCPError(
                types.INVALID_PARAMS,
                f"No open request {request_id!r}: unknown, answered or timed out.",
            ) from None
        except ElicitValidationError as exc:
            return _error(str(exc))
        return _result({"ok": True, "request_id": request_id, "action": result.action})
