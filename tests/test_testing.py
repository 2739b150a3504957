"""chatbridge.testing: a tool run to its end through the real runtime, its questions answered
from a script, and a clear failure when the script and the tool disagree."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from chatbridge import Cancel, Decline, ElicitKey, ElicitRequest, ToolContext, create_mcp_tool
from chatbridge.testing import UnexpectedQuestion, run_tool


class Trip(BaseModel):
    city: str


class Nights(BaseModel):
    nights: int


class Ok(BaseModel):
    ok: bool


NIGHTS = ElicitKey("nights", Nights)


async def plan(params: Trip, ctx: ToolContext) -> dict[str, Any]:
    await ctx.log("info", "Planning", city=params.city)
    await ctx.notify("Asking", progress=1, total=2)
    nights = await ctx.elicit(NIGHTS, message=f"How many nights in {params.city}?")
    if not nights.accepted:
        return {"planned": False, "why": nights.action}
    ok = await ctx.elicit("ok", message=f"Book {nights.content.nights} nights?")
    tip = await ctx.sample(f"One tip for {params.city}.")
    return {
        "planned": ok.accepted and ok.content.ok,
        "nights": nights.content.nights,
        "tip": tip.text,
    }


tool = create_mcp_tool("plan").parameters(Trip).elicits(NIGHTS, ok=Ok).execute(plan)


async def test_a_scripted_run_answers_by_typed_and_string_keys_and_keeps_a_transcript() -> None:
    run = await run_tool(
        tool, {"city": "Lisbon"}, answers={NIGHTS: {"nights": 3}, "ok": Ok(ok=True)}
    )
    assert run.status == "completed"
    assert run.result["planned"] is True and run.result["nights"] == 3
    assert "Lisbon" in run.result["tip"]  # the offline model answered ctx.sample
    assert run.asked == ["nights", "ok"]
    assert run.questions[0].message == "How many nights in Lisbon?"
    assert run.logs == [("info", "Planning", {"city": "Lisbon"})]
    assert run.progress == [("Asking", 1, 2)]


async def test_decline_cancel_and_answers_computed_from_the_question() -> None:
    assert (await run_tool(tool, {"city": "Oslo"}, answers={NIGHTS: Decline()})).result == {
        "planned": False,
        "why": "decline",
    }
    assert (await run_tool(tool, {"city": "Oslo"}, answers={NIGHTS: Cancel()})).result[
        "why"
    ] == "cancel"

    async def from_question(request: ElicitRequest) -> dict[str, int]:
        return {"nights": len(request.message)}

    run = await run_tool(
        tool, {"city": "Oslo"}, answers={NIGHTS: from_question, "ok": {"ok": False}}
    )
    assert run.result["nights"] == len("How many nights in Oslo?")
    assert run.result["planned"] is False


async def test_a_refused_answer_is_recorded_and_the_next_one_given() -> None:
    run = await run_tool(
        tool,
        {"city": "Rome"},
        answers={NIGHTS: [{"nights": "many"}, {"nights": 2}], "ok": {"ok": True}},
    )
    assert run.result["nights"] == 2
    assert run.asked == ["nights", "ok"]
    assert [key for key, _ in run.refused] == ["nights"]
    assert list(run.refused[0][1]) == ["nights"]


async def test_a_question_without_an_answer_fails_with_what_was_asked() -> None:
    with pytest.raises(UnexpectedQuestion) as info:
        await run_tool(tool, {"city": "Nice"}, answers={NIGHTS: {"nights": 1}})
    message = str(info.value)
    assert "The tool asked 'ok' ('Book 1 nights?') and the test has no answer for it." in message
    assert "asked 'nights': How many nights in Nice?" in message


async def test_a_refused_answer_with_none_left_fails_naming_the_refusal() -> None:
    with pytest.raises(UnexpectedQuestion) as info:
        await run_tool(tool, {"city": "Nice"}, answers={NIGHTS: {"nights": "x"}})
    assert "has no answer left for it" in str(info.value)
    assert "refused 'nights'" in str(info.value)


async def test_a_tool_that_fails_or_needs_approval() -> None:
    async def broken(params: Any, ctx: ToolContext) -> None:
        raise RuntimeError("no flights today")

    failing = create_mcp_tool("broken").elicits().execute(broken)
    run = await run_tool(failing)
    assert (run.status, run.error) == ("failed", "RuntimeError: no flights today")

    async def delete(params: Any, ctx: ToolContext) -> str:
        return "deleted"

    guarded = create_mcp_tool("delete").elicits().needs_approval().execute(delete)
    assert (await run_tool(guarded)).result == "deleted"
    denied = await run_tool(guarded, approve=False)
    assert (denied.status, denied.error, denied.asked) == (
        "aborted",
        "Denied by the user.",
        ["__approval__"],
    )
