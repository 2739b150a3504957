"""A conversation's phases and the moves between them (seed 001's state machine, DESIGN §3).

The chat protocol (``chatbridge.engine.protocol``) names them too: a ``conversation_state``
event carries the phase.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["TRANSITIONS", "Phase", "PhaseError"]

Phase = Literal[
    "idle",
    "process_plugin_abort",
    "process_plugin_responses",
    "start_iteration",
    "streaming",
    "executing_tools",
    "plugin_awaiting_elicit",
    "awaiting_approval",
    "done",
]

# The moves between a conversation's phases (seed 001's state machine): one table, read only by
# ``protocol.check_move``, which ``ChatHub.phase`` (the only writer of a phase) calls first
# (Starlette's ``WebSocketState`` is the model: a move the table does not hold is a bug, and
# raises).
#
# A turn goes ``process_plugin_abort`` → ``process_plugin_responses`` → (``start_iteration`` →
# ``streaming`` → ``executing_tools``)… → ``done``; while its tool calls run, the phase is derived
# from what they wait for (``LiveConversation.waiting_phase``: a question, an approval, or
# nothing). A turn that resumes suspended calls starts in ``executing_tools``, as does a tool call
# run on its own. Whatever happens in a turn, it ends ``done`` (a failed turn too).

_TOOLS: frozenset[Phase] = frozenset(
    {"executing_tools", "plugin_awaiting_elicit", "awaiting_approval"}
)
_TURN_STARTS: frozenset[Phase] = frozenset({"process_plugin_abort", "executing_tools"})

TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    # A turn starts, or a tool call runs on its own (``ChatHub.execute_tool_call``).
    "idle": _TURN_STARTS | _TOOLS,
    "done": _TURN_STARTS | _TOOLS,
    "process_plugin_abort": frozenset({"process_plugin_responses"}),
    "process_plugin_responses": frozenset({"start_iteration"}),
    "start_iteration": frozenset({"streaming"}),
    "streaming": frozenset({"executing_tools"}),
    # Waiting for the calls: their questions and approvals come and go; a turn that resumed
    # its calls goes on with the user's message, the next reply or nothing.
    "executing_tools": _TOOLS | {"process_plugin_abort", "start_iteration"},
    "plugin_awaiting_elicit": _TOOLS | {"start_iteration"},
    "awaiting_approval": _TOOLS | {"start_iteration"},
}


class PhaseError(RuntimeError):
    """A phase change the table does not allow (a bug in the engine)."""
