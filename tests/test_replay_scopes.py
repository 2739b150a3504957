"""Replay by scope: concurrent branches get their own answers back; a changed tool diverges."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from chatbridge import SessionManager, ToolContext, create_mcp_tool
from chatbridge.author.sampling import SampleRequest, SampleResult
from tests.support import PickHotel, until_pause


class OrderedSampler:
    """A real ``Sampler`` whose answer to ``slow`` waits until ``release`` was answered.

    The order of completion is forced by an ``asyncio.Event``, not by a timer. Every answer
    carries a counter, so a replayed answer is told apart from a fresh one.
    """

    def __init__(self, slow: str, release: str) -> None:
        self.slow, self.release = slow, release
        self.released = asyncio.Event()
        self.prompts: list[str] = []  # in the order they were answered

    async def __call__(self, request: SampleRequest) -> SampleResult:
        prompt = str(request.messages[-1]["content"])
        if prompt == self.slow:
            await self.released.wait()
        self.prompts.append(prompt)
        if prompt == self.release:
            self.released.set()
        return SampleResult(f"{prompt} -> answer {len(self.prompts)}", "ordered")


async def research(ctx: ToolContext, topic: str) -> list[str]:
    """A branch: a question, then a follow-up about the same topic."""
    first = await ctx.sample(f"{topic}: question")
    second = await ctx.sample(f"{topic}: follow-up")
    return [first.text, second.text]


async def compare(params: Any, ctx: ToolContext) -> dict[str, Any]:
    rome, oslo = await asyncio.gather(ctx.branch(research, "Rome"), ctx.branch(research, "Oslo"))
    return {"rome": rome, "oslo": oslo}


compare_tool = create_mcp_tool("compare").elicits().execute(compare)


@pytest.fixture
async def ordered() -> AsyncIterator[tuple[SessionManager, OrderedSampler]]:
    # Rome's first question is answered only after both of Oslo's.
    sampler = OrderedSampler(slow="Rome: question", release="Oslo: follow-up")
    mgr = SessionManager(sampler=sampler)
    yield mgr, sampler
    await mgr.shutdown("test finished")


async def test_concurrent_branches_replay_each_with_its_own_answers(
    ordered: tuple[SessionManager, OrderedSampler],
) -> None:
    manager, sampler = ordered
    live = await manager.create(compare_tool, {}, call_id="live")
    [(kind, result)] = await until_pause(live)
    assert kind == "completed"
    assert sampler.prompts == [
        "Oslo: question",
        "Oslo: follow-up",
        "Rome: question",
        "Rome: follow-up",
    ]
    assert result == {
        "rome": ["Rome: question -> answer 3", "Rome: follow-up -> answer 4"],
        "oslo": ["Oslo: question -> answer 1", "Oslo: follow-up -> answer 2"],
    }
    stored = json.loads(json.dumps(live.journal))  # as it comes back from a database
    assert [(e["scope"], e["pos"], e["result"]["text"]) for e in stored] == [
        ("1", 1, "Rome: question -> answer 3"),
        ("2", 1, "Oslo: question -> answer 1"),
        ("2", 2, "Oslo: follow-up -> answer 2"),
        ("1", 2, "Rome: follow-up -> answer 4"),
    ]

    replayed = await manager.create(compare_tool, {}, call_id="replayed", journal=stored)
    assert await until_pause(replayed) == [("completed", result)]
    assert len(sampler.prompts) == 4  # nothing was asked again


async def test_a_partly_recorded_branch_asks_only_what_is_missing(
    ordered: tuple[SessionManager, OrderedSampler],
) -> None:
    manager, sampler = ordered
    live = await manager.create(compare_tool, {}, call_id="live")
    [(_, result)] = await until_pause(live)
    # Rome's follow-up was recorded last: drop it, as if the worker died before it.
    partial = live.journal[:3]
    sampler.released.set()
    replayed = await manager.create(compare_tool, {}, call_id="partial", journal=partial)
    [(kind, again)] = await until_pause(replayed)
    assert kind == "completed"
    assert sampler.prompts[4:] == ["Rome: follow-up"]
    assert again["oslo"] == result["oslo"]
    assert again["rome"] == ["Rome: question -> answer 3", "Rome: follow-up -> answer 5"]


def ticket_tool(price: int) -> Any:
    async def body(params: Any, ctx: ToolContext) -> Any:
        return await ctx.step("charge", lambda amount: {"charged": amount}, price)

    return create_mcp_tool("ticket").elicits().execute(body)


async def test_a_step_with_other_args_raises_replay_divergence(manager: SessionManager) -> None:
    first = await manager.create(ticket_tool(25), {}, call_id="t1")
    assert await until_pause(first) == [("completed", {"charged": 25})]
    changed = await manager.create(ticket_tool(30), {}, call_id="t2", journal=first.journal)
    [(kind, error)] = await until_pause(changed)
    digest = first.journal[0]["digest"]
    assert kind == "failed"
    assert error.startswith(
        "ReplayDivergence: Replay of tool 'ticket' diverged at position 1 of the tool body: "
        f"the journal recorded step 'charge' (request digest {digest[:12]}), the tool now "
        "called step 'charge' with different args (request digest "
    )


async def test_a_branch_with_another_prompt_raises_replay_divergence(
    manager: SessionManager,
) -> None:
    def tool(prompt: str) -> Any:
        async def branch(ctx: ToolContext) -> str:
            return (await ctx.sample(prompt)).text

        async def body(params: Any, ctx: ToolContext) -> str:
            return await ctx.branch(branch)

        return create_mcp_tool("tip").elicits().execute(body)

    first = await manager.create(tool("A tip for Rome"), {}, call_id="r1")
    assert (await until_pause(first))[-1][0] == "completed"
    changed = await manager.create(tool("A tip for Oslo"), {}, call_id="r2", journal=first.journal)
    [(kind, error)] = await until_pause(changed)
    assert kind == "failed"
    assert "diverged at position 1 of branch 1: the journal recorded sample 'sample'" in error
    assert "the tool now called sample 'sample' with a different prompt" in error


async def test_a_branch_scope_is_fixed_when_branch_is_called(manager: SessionManager) -> None:
    seen: list[tuple[str, int]] = []

    async def probe(ctx: ToolContext) -> None:
        seen.append((ctx.scope, ctx.depth))
        if ctx.depth == 1 and ctx.scope == "2":
            await ctx.branch(probe)

    async def body(params: Any, ctx: ToolContext) -> None:
        later = ctx.branch(probe)  # called first: branch 1, although it runs second
        sooner = ctx.branch(probe)
        await sooner
        await later

    tool = create_mcp_tool("scopes").elicits().execute(body)
    session = await manager.create(tool, {}, call_id="scopes")
    assert await until_pause(session) == [("completed", None)]
    assert seen == [("2", 1), ("2.1", 2), ("1", 1)]


async def test_replaying_is_true_until_every_record_is_consumed(manager: SessionManager) -> None:
    flags: list[tuple[str, bool]] = []

    async def body(params: Any, ctx: ToolContext) -> None:
        flags.append(("start", ctx.replaying))
        await ctx.step("one", lambda: 1)
        flags.append(("after one", ctx.replaying))
        await ctx.step("two", lambda: 2)
        flags.append(("after two", ctx.replaying))
        await ctx.elicit("pick_hotel", message="Which?")

    tool = create_mcp_tool("flags").elicits(pick_hotel=PickHotel).execute(body)
    live = await manager.create(tool, {}, call_id="f1")
    await until_pause(live)
    assert flags == [("start", False), ("after one", False), ("after two", False)]
    flags.clear()
    replayed = await manager.create(tool, {}, call_id="f2", journal=live.journal)
    await until_pause(replayed)
    assert flags == [("start", True), ("after one", True), ("after two", False)]
