"""What a 2026-07-28 round hands out and checks: ``requestState``, the ``input_required`` a
question travels as, and whether a retry's answer is the one on record (``chatbridge.mcp.rounds``
drives the rounds)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from pydantic import BaseModel

from chatbridge.author.approval import APPROVAL_KEY, Approval
from chatbridge.author.elicit import ElicitId, ElicitRequest, result_to_dict, validate_result
from chatbridge.author.exceptions import ElicitValidationError
from chatbridge.author.tools import McpTool
from chatbridge.mcp.hosts import from_wire, wire_request
from chatbridge.mcp.urls import url_params

__all__ = ["RoundState", "answer_of", "input_required", "open_at_end", "same_answer"]


@dataclass(frozen=True)
class RoundState:
    """What ``requestState`` holds: which call, which question, whose; ``url`` for a URL
    question (its answer comes from its page: the client's is consent only)."""

    call_id: str
    elicit_id: str
    caller: str
    url: bool = False

    def dump(self) -> str:
        data: dict[str, Any] = {
            "call": self.call_id,
            "elicit": self.elicit_id,
            "caller": self.caller,
        }
        if self.url:
            data["url"] = True
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def parse(cls, raw: str) -> RoundState:
        """``ValueError`` for anything this server did not mint."""
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("requestState is not an object")
        call, elicit, caller = (data.get(k) for k in ("call", "elicit", "caller"))
        if not (isinstance(call, str) and isinstance(elicit, str) and isinstance(caller, str)):
            raise ValueError("requestState lacks call, elicit or caller")
        return cls(call, elicit, caller, data.get("url") is True)


def answer_of(raw: Any) -> Any:
    """A client's ``inputResponses`` entry as the answer a session takes."""
    answer = types.ElicitResult.model_validate(raw) if isinstance(raw, dict) else raw
    return from_wire(answer.action, answer.content, answer.meta)


def input_required(
    flat: Mapping[str, dict[str, dict[str, Any]]],
    request: ElicitRequest,
    caller: str,
    note: str,
) -> types.InputRequiredResult:
    """``request`` as the ``input_required`` that hands it out, with its ``requestState``;
    ``flat``: the form schema of each tool's keys."""
    url = request.mode == "url"
    state = RoundState(request.call_id, str(request.id), caller, url)
    form = flat[request.tool_name][request.key]
    params: types.ElicitRequestFormParams | types.ElicitRequestURLParams = (
        url_params(request, with_id=False) if url else wire_request(request, form, note)
    )
    return types.InputRequiredResult(
        input_requests={str(request.id): types.ElicitRequest(params=params)},
        request_state=state.dump(),
    )


def open_at_end(journal: list[dict[str, Any]], elicit_id: str) -> bool:
    """Was ``elicit_id`` the question an ended call left unanswered (it ended while the
    question was open: refused too often, expired, stopped)? Its retry gets the call's end."""
    try:
        wanted = ElicitId.parse(elicit_id)
    except ValueError:
        return False
    return wanted.seq == 1 + sum(1 for e in journal if e.get("kind") == "elicit")


def same_answer(
    tool: McpTool[Any, Any], journal: list[dict[str, Any]], elicit_id: str, raw: Any
) -> str | None:
    """None if ``raw`` is the answer on record for ``elicit_id``; else why not, in words."""
    try:
        wanted = ElicitId.parse(elicit_id)
    except ValueError:
        return "This requestState names no question of this call."
    elicits = [e for e in journal if e.get("kind") == "elicit"]
    if wanted.seq > len(elicits) or elicits[wanted.seq - 1].get("key") != wanted.key:
        return "This requestState names a question this call has not asked."
    recorded = elicits[wanted.seq - 1]["result"]
    refused = (
        f"The question {wanted.key!r} of this call was already answered and its answer "
        "acted on; a different answer cannot be accepted. Send the same answer again to get "
        "the same outcome, or call the tool again without requestState."
    )
    if raw is None:
        return refused
    try:
        models: dict[str, type[BaseModel]] = {APPROVAL_KEY: Approval, **tool.elicits}
        given = validate_result(answer_of(raw), models[wanted.key], elicit_id)
    except (ElicitValidationError, KeyError, ValueError):
        return refused
    return None if result_to_dict(given) == recorded else refused
