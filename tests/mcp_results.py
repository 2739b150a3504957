"""Reading what the official MCP client returns, with the checks a test needs: the text of a
content block, an ``input_required`` result and its requests, an elicitation's parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types

__all__ = ["InputResponses", "elicitation", "input_required", "responses", "text_of"]

InputResponses = dict[
    str,
    types.CreateMessageResult
    | types.CreateMessageResultWithTools
    | types.ListRootsResult
    | types.ElicitResult,
]


def text_of(block: Any) -> str:
    """The text of a content block (or resource contents) that must be text."""
    assert isinstance(block, types.TextContent | types.TextResourceContents), block
    return block.text


def input_required(result: Any) -> types.InputRequiredResult:
    """A tool call's result that must be asking for input (the 2026-07-28 round trip)."""
    assert isinstance(result, types.InputRequiredResult), result
    return result


def elicitation(request: Any) -> types.ElicitRequestFormParams | types.ElicitRequestURLParams:
    """The parameters of an input request that must be an elicitation."""
    assert isinstance(request, types.ElicitRequest), request
    return request.params


def responses(answers: Mapping[str, types.ElicitResult]) -> InputResponses:
    """Elicitation answers as a call's ``input_responses``."""
    return dict(answers)
