"""The official MCP SDK baseline: a tool that elicits a one-field answer repeatedly.

Served over streamable HTTP by uvicorn: ``python bench/mcp_sdk_server.py PORT``.
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field


class Answer(BaseModel):
    value: str = Field(min_length=1, max_length=64, title="Value")


server = MCPServer("bench-sdk", log_level="WARNING")


@server.tool()
async def loop_ask(count: int, ctx: Context) -> int:
    """Ask a one-field question ``count`` times."""
    answered = 0
    for n in range(count):
        result = await ctx.elicit(f"Question {n + 1}: any value?", Answer)
        if result.action != "accept":
            break
        answered += 1
    return answered


def serve(mcp_server: MCPServer, port: int) -> None:
    """Serve ``mcp_server`` over streamable HTTP with uvicorn on loopback ``port``."""
    uvicorn.run(
        mcp_server.streamable_http_app(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )


if __name__ == "__main__":
    serve(server, int(sys.argv[1]))
