"""Which transports carry a call (a session's ``meta["transport"]``), where more than one
layer needs to tell them apart."""

from __future__ import annotations

__all__ = ["HELD_BY_REQUEST"]

# MCP calls carried by one open request (pushed questions, or ``_respond``): their client
# reaches them only through that request and its questions.
HELD_BY_REQUEST = ("mcp-push", "mcp-respond")
