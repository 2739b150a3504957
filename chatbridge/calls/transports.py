"""Which transports carry a call (a session's ``meta["transport"]``), where more than one
layer needs to tell them apart."""

from __future__ import annotations

__all__ = ["HELD_BY_REQUEST", "HOLDER_GONE", "TASK"]

# MCP calls carried by one open request (pushed questions, or ``_respond``): their client
# reaches them only through that request and its questions.
HELD_BY_REQUEST = ("mcp-push", "mcp-respond")
# Why such a call ended when its worker died with its request (on record; told its client).
HOLDER_GONE = "the server running this call stopped; call the tool again"

# An MCP task (the Tasks extension): its client asks for it by id, on any worker.
TASK = "mcp-task"
