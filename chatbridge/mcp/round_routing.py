"""2026-07-28 retries on any worker: one that reaches a worker not holding its call is served
by the worker that does (issue 27), so a balancer may send each retry anywhere.

The worker that received the retry (its ``requestState`` already opened and checked there:
the caller, the tool) sends it through the channel layer to the call's holder: the tool's
name, its arguments, the state, the client's ``inputResponses`` and the elicitation modes the
client declared. The holder serves it as if it had received it (``Rounds.retry``, under the
call's lock: exactly once, the same-answer rules and all), with a channel that drops
notifications (its client is not connected here), and sends back the result or the MCP error,
which the first worker returns to its client (its ``requestState`` sealed there, on the way
out). A routed retry is never routed again: a holder that no longer holds the call resumes it
itself, by claiming it, or refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR
from pydantic import BaseModel

from chatbridge.mcp.round_state import RoundState

__all__ = ["Routed", "outcome_from", "request_of", "served"]

Outcome = types.CallToolResult | types.InputRequiredResult


class Routed(BaseModel):
    """A retry as it travels to the holder of its call."""

    tool: str
    arguments: dict[str, Any]
    call_id: str
    elicit_id: str
    caller: str
    url: bool = False
    responses: dict[str, Any]
    modes: list[str]
    meta: dict[str, str]

    @property
    def state(self) -> RoundState:
        return RoundState(self.call_id, self.elicit_id, self.caller, self.url)


def request_of(
    tool: str,
    arguments: Mapping[str, Any],
    state: RoundState,
    responses: Mapping[str, Any],
    modes: frozenset[str],
    meta: Mapping[str, str],
) -> dict[str, Any]:
    """The message that carries a retry to its holder (JSON: answers as the client sent them)."""
    answers = {
        key: value.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(value, BaseModel)
        else value
        for key, value in responses.items()
    }
    routed = Routed(
        tool=tool,
        arguments=dict(arguments),
        call_id=state.call_id,
        elicit_id=state.elicit_id,
        caller=state.caller,
        url=state.url,
        responses=answers,
        modes=sorted(modes),
        meta=dict(meta),
    )
    return routed.model_dump(mode="json")


def served(outcome: Outcome | MCPError) -> dict[str, Any]:
    """What the holder sends back: the result, ``input_required``, or the MCP error."""
    if isinstance(outcome, MCPError):
        return {"error": {"code": outcome.error.code, "message": outcome.error.message}}
    kind = "input_required" if isinstance(outcome, types.InputRequiredResult) else "result"
    return {kind: outcome.model_dump(mode="json", by_alias=True, exclude_none=True)}


def outcome_from(reply: Mapping[str, Any]) -> Outcome:
    """The holder's reply as the result to return; its MCP error raised."""
    if "error" in reply:
        error = reply["error"]
        raise MCPError(int(error.get("code", INTERNAL_ERROR)), str(error.get("message", "")))
    if "input_required" in reply:
        return types.InputRequiredResult.model_validate(reply["input_required"])
    return types.CallToolResult.model_validate(reply["result"])
