"""The guest UIs of MCP Apps as resources (``resources/list``, ``resources/templates/list``,
``resources/read``); ``chatbridge.mcp.apps`` holds the app-only tools a guest UI answers by."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from chatbridge.mcp import apps

__all__ = ["MCP_APP_MIME", "AppResources", "UiRenderer"]

RESOURCE_NOT_FOUND = -32002  # server/resources up to 2025-11-25; mcp_types has no name for it
MCP_APP_MIME = "text/html;profile=mcp-app"
UiRenderer = Callable[[str], str]  # ui:// URI → the guest page's HTML


class AppResources:
    """The ``ui://`` pages of a plugin registry, listed and read."""

    def __init__(self, ui_uris: Sequence[str], render_ui: UiRenderer | None) -> None:
        self.ui_uris, self.render_ui = ui_uris, render_ui

    async def list(
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

    async def list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        """None: every resource is listed by its URI. Served because a server that declares
        ``resources`` answers ``resources/templates/list`` too (required on 2026-07-28)."""
        return types.ListResourceTemplatesResult(resource_templates=[])

    async def read(
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
