"""create_tool: the handoff sugar runs through the same session path as MCP-style tools."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from chatbridge import (
    Accept,
    Cancel,
    Decline,
    FormPost,
    PluginContext,
    PluginRegistry,
    SessionManager,
    ToolDefinitionError,
    create_tool,
)
from chatbridge.author.handoff import HANDOFF_KEY
from plugins.pick_card.tool import PickedCard, card_name, pick_card
from tests.support import until_pause


class Scripted:
    def __init__(self, *posts: FormPost) -> None:
        self.posts = list(posts)
        self.pages: list[dict[str, Any]] = []

    async def show(self, template: str, context: dict[str, Any], errors: Any) -> FormPost:
        self.pages.append({"template": template, "errors": errors, **context})
        return self.posts.pop(0)


async def answer_with(plugin: Any, session: Any, surface: Scripted) -> None:
    request = session.pending
    result = await plugin.handle(request, PluginContext(request, surface))
    await session.respond_to_elicit(request.id, result)


def test_create_tool_builds_an_mcp_tool_with_one_handoff_key_and_a_plugin() -> None:
    assert pick_card.name == "pick_card"
    assert list(pick_card.elicits) == [HANDOFF_KEY] == ["__handoff__"]
    assert pick_card.elicits[HANDOFF_KEY] is PickedCard
    assert pick_card.plugin.tool is pick_card and pick_card.plugin.name == "pick_card"
    assert pick_card.parameters_schema["properties"]["count"]["default"] == 5
    registry = PluginRegistry([pick_card])  # the tool registers its own plugin
    assert registry.get("pick_card") is pick_card.plugin


def test_a_handoff_needs_a_client() -> None:
    with pytest.raises(ToolDefinitionError, match="has no .handoff\\(client=...\\)"):
        create_tool("nothing").build()


async def test_pick_card_end_to_end_through_a_session(manager: SessionManager) -> None:
    session = await manager.create(pick_card, {"count": 3}, call_id="pc1")
    [(kind, elicit_id, message)] = await until_pause(session)
    assert (kind, elicit_id, message) == ("elicit", "pick_card:__handoff__:pc1:1", "Pick a card")
    hand = session.pending.context["cards"]
    assert len(hand) == 3 and all({"code", "rank", "suit", "name", "red"} <= set(c) for c in hand)
    not_dealt = next(c for c in ("AS", "KH", "2C", "3D") if c not in {h["code"] for h in hand})
    surface = Scripted(
        FormPost("accept", {"card": not_dealt}), FormPost("accept", {"card": hand[1]["code"]})
    )
    await answer_with(pick_card.plugin, session, surface)
    assert surface.pages[1]["errors"] == {"card": ["Pick one of the cards on the table."]}
    assert await until_pause(session) == [("completed", f"You picked the {hand[1]['name']}.")]
    assert [e["kind"] for e in session.journal] == ["step", "elicit"]  # before() was recorded


async def test_replay_deals_the_same_hand(manager: SessionManager) -> None:
    first = await manager.create(pick_card, {"count": 4}, call_id="deal1")
    await until_pause(first)
    replayed = await manager.create(pick_card, {"count": 4}, call_id="deal2", journal=first.journal)
    await until_pause(replayed)
    assert replayed.pending.context == first.pending.context


async def test_declined_or_cancelled_handoffs_tell_the_model_cancelled(
    manager: SessionManager,
) -> None:
    for i, post in enumerate((FormPost("decline"), FormPost("cancel"))):
        session = await manager.create(pick_card, {}, call_id=f"c{i}")
        await until_pause(session)
        await answer_with(pick_card.plugin, session, Scripted(post))
        assert await until_pause(session) == [("completed", {"cancelled": True})]


async def test_without_before_or_after_the_params_go_in_and_the_answer_comes_out(
    manager: SessionManager,
) -> None:
    class Question(BaseModel):
        topic: str

    async def client(context: dict[str, Any], ctx: PluginContext) -> dict[str, Any]:
        return {"echo": context["topic"].upper()}

    tool = create_tool("echo").parameters(Question).handoff(client=client).build()
    session = await manager.create(tool, {"topic": "tea"}, call_id="e1")
    await until_pause(session)
    assert session.pending.context == {"topic": "tea"}
    await answer_with(tool.plugin, session, Scripted())
    assert await until_pause(session) == [("completed", {"echo": "TEA"})]


async def test_client_may_return_results_directly(manager: SessionManager) -> None:
    for value, expected in (
        (Decline(), {"cancelled": True}),
        (Cancel(), {"cancelled": True}),
        (Accept({"x": 1}), {"x": 1}),
    ):

        async def client(context: dict[str, Any], ctx: PluginContext, value: Any = value) -> Any:
            return value

        tool = create_tool("direct").handoff(client=client).build()
        session = await manager.create(tool, {}, call_id=f"d{expected}")
        await until_pause(session)
        await answer_with(tool.plugin, session, Scripted())
        assert await until_pause(session) == [("completed", expected)]


def test_card_names() -> None:
    assert card_name("QH") == "Queen of hearts" and card_name("10S") == "10 of spades"
