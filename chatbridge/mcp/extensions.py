"""Applying an SDK ``Extension`` to the lowlevel ``Server`` this project builds.

The SDK applies extensions only in ``MCPServer(extensions=...)``; ``McpBridge`` builds a
lowlevel ``Server`` (for its own tool listing, schemas and request state), so this does the same
wiring by hand: the extension's methods, gated to their protocol versions, its ``tools/call``
interceptor, and its entry in the server's capabilities.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, compose_tool_call_handler
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import METHOD_NOT_FOUND

__all__ = ["install"]


def install(
    server: Server[Any],
    extension: Extension,
    call_tool: Callable[
        [ServerRequestContext[Any, Any], types.CallToolRequestParams], Awaitable[HandlerResult]
    ],
) -> None:
    """Apply ``extension`` to a lowlevel ``Server`` as ``MCPServer(extensions=...)`` would:
    its methods (gated to their protocol versions), its ``tools/call`` interceptor around
    ``call_tool``, and its entry in the server's capabilities."""
    for binding in extension.methods():
        server.add_request_handler(binding.method, binding.params_type, _gated(binding))
    server.add_request_handler(
        "tools/call",
        types.CallToolRequestParams,
        compose_tool_call_handler([extension], call_tool),
    )
    server.extensions[extension.identifier] = extension.settings()


def _gated(binding: MethodBinding) -> Any:
    versions = binding.protocol_versions

    async def gated(ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        if versions is not None and ctx.protocol_version not in versions:
            raise MCPError(METHOD_NOT_FOUND, "Method not found", data=binding.method)
        return await binding.handler(ctx, params)

    return gated
