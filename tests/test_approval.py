"""Approval is part of the call (DESIGN §9): a tool declared ``.needs_approval()`` asks before it
runs on every transport, and says so in its MCP annotations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from chatbridge import PluginRegistry, SessionManager
from chatbridge.author.approval import APPROVAL_KEY
from chatbridge.author.model_context import extract_context
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.mcp.server import McpBridge, McpSettings
from plugins.book_flight.plugin import book_flight_plugin
from plugins.feedback.tool import feedback_plugin
from tests.mcp_results import elicitation, responses, text_of

FEEDBACK: dict[str, Any] = {
    "name": "Ada",
    "email": "ada@example.com",
    "visit_date": "2026-11-20",
    "rating": 5,
    "topic": "idea",
}


@pytest.fixture
async def bridge() -> AsyncIterator[McpBridge]:
    manager = SessionManager(sampler=LiteLLMSampler("offline/approval"))
    yield McpBridge(
        PluginRegistry([feedback_plugin, book_flight_plugin]),
        manager,
        McpSettings(state_keys=[b"k" * 32]),
    )
    await manager.shutdown("test finished")


class Approver:
    """An MCP user: answers the approval as told, then fills the feedback form."""

    def __init__(self, approval: types.ElicitResult) -> None:
        self.approval = approval
        self.messages: list[str] = []
        self.schemas: list[dict[str, Any]] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.messages.append(params.message)
        self.schemas.append(params.requested_schema)
        if len(self.messages) == 1:
            return self.approval
        return types.ElicitResult(action="accept", content=FEEDBACK)


async def test_a_tool_that_needs_approval_asks_a_legacy_client_before_it_runs(
    bridge: McpBridge,
) -> None:
    person = Approver(types.ElicitResult(action="accept", content={"approve": True}))
    async with Client(bridge.server, mode="legacy", elicitation_callback=person) as client:
        result = await client.call_tool("send_feedback", {})
    assert not result.is_error, result.content
    assert result.structured_content["received"] is True
    first = person.messages[0]
    assert first.startswith("Allow the tool 'send_feedback' to run with {}?")
    assert set(person.schemas[0]["properties"]) >= {"approve", "reason"}
    assert extract_context(person.schemas[0], first) == {"tool": "send_feedback", "arguments": {}}
    assert person.messages[1].startswith("Tell us what you think")


@pytest.mark.parametrize(
    ("answer", "told"),
    [
        (types.ElicitResult(action="decline"), "The user denied this tool call."),
        (
            types.ElicitResult(action="accept", content={"approve": False, "reason": "not now"}),
            "The user denied this tool call: not now",
        ),
    ],
)
async def test_a_denied_call_never_runs_and_the_client_is_told(
    bridge: McpBridge, answer: types.ElicitResult, told: str
) -> None:
    person = Approver(answer)
    async with Client(bridge.server, mode="legacy", elicitation_callback=person) as client:
        result = await client.call_tool("send_feedback", {})
    assert result.is_error and text_of(result.content[0]) == told
    assert len(person.messages) == 1  # the feedback form was never asked


async def test_approval_over_input_required_is_journaled_once(bridge: McpBridge) -> None:
    async with Client(
        bridge.server,
        mode="2026-07-28",
        elicitation_callback=Approver(
            types.ElicitResult(action="accept", content={"approve": True})
        ),
    ) as client:
        first = await client.session.call_tool("send_feedback", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        [(key, request)] = first.input_requests.items()
        assert f":{APPROVAL_KEY}:" in key
        assert elicitation(request).message.startswith("Allow the tool 'send_feedback' to run")
        approve = responses({key: types.ElicitResult(action="accept", content={"approve": True})})
        second = await client.session.call_tool(
            "send_feedback",
            {},
            allow_input_required=True,
            input_responses=approve,
            request_state=first.request_state,
        )
        assert isinstance(second, types.InputRequiredResult)
        [form_key] = second.input_requests
        assert ":feedback:" in form_key
        again = await client.session.call_tool(  # the approval retried: the same outcome
            "send_feedback",
            {},
            allow_input_required=True,
            input_responses=approve,
            request_state=first.request_state,
        )
        assert isinstance(again, types.InputRequiredResult)
        assert list(again.input_requests) == [form_key]
        done = await client.session.call_tool(
            "send_feedback",
            {},
            allow_input_required=True,
            input_responses={form_key: types.ElicitResult(action="accept", content=FEEDBACK)},
            request_state=second.request_state,
        )
    assert isinstance(done, types.CallToolResult) and not done.is_error, done
    assert done.structured_content["reference"].startswith("FB-")


async def test_tools_that_need_approval_declare_it_in_their_annotations(
    bridge: McpBridge,
) -> None:
    async with Client(bridge.server, mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    hints = tools["send_feedback"].annotations
    assert hints is not None
    assert (hints.read_only_hint, hints.destructive_hint) == (False, True)
    assert tools["book_flight"].annotations is None
