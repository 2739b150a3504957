"""A step is exactly once for the world (DESIGN §11): its start is on record before its side
effect, the step function receives a stable idempotency key, and a step that started and has
no recorded result is run again only with that key, never silently."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from pydantic import BaseModel

from chatbridge import (
    ElicitKey,
    ReplayDivergence,
    StepOutcomeUnknown,
    ToolContext,
    create_mcp_tool,
)
from chatbridge.author.elicit import Accept
from chatbridge.calls.journal import Journal
from chatbridge.calls.manager import SessionManager
from chatbridge.records.models import JournalRecord, ToolSession
from chatbridge.runtime import ChatBridgeRuntime

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]


class Route(BaseModel):
    route: str = "JFK-LAX"


class Pay(BaseModel):
    card: str


PAY = ElicitKey("pay", Pay)


class Office:
    """A ticket office that, like a booking system with idempotency keys, issues one ticket
    per key; ``hold`` keeps its answer back until the test lets it go."""

    def __init__(self) -> None:
        self.calls: list[str | None] = []
        self.tickets: dict[str, str] = {}
        self.hold: asyncio.Event | None = None
        self.reached = asyncio.Event()

    async def issue(self, route: str, *, idempotency_key: str) -> str:
        self.calls.append(idempotency_key)
        self.reached.set()
        if self.hold is not None:
            await self.hold.wait()
        return self.tickets.setdefault(idempotency_key, f"T-{route}-{len(self.tickets) + 1}")

    async def issue_unkeyed(self, route: str) -> str:
        self.calls.append(None)
        self.reached.set()
        if self.hold is not None:
            await self.hold.wait()
        ticket = f"T-{route}-{len(self.calls)}"
        self.tickets[ticket] = ticket
        return ticket


def refund(paid: Pay, *, idempotency_key: str) -> dict[str, str]:
    return {"refund": f"R-{idempotency_key}"}


def ticket_tool(step: Any) -> Any:
    async def run(params: Route, ctx: ToolContext) -> dict[str, Any]:
        paid = await ctx.elicit(PAY, message="Pay for the ticket")
        if not paid.accepted:
            return {"booked": False}
        return {"booked": True, "ticket": await ctx.step("issue_ticket", step, params.route)}

    return (
        create_mcp_tool("buy_ticket")
        .parameters(Route)
        .elicits(PAY)
        .commits(PAY, compensate=refund, label="the payment")
        .execute(run)
    )


def journal_of(call_id: str) -> list[dict[str, Any]]:
    return ToolSession.objects.get(pk=call_id).journal_entries()


def step_rows(call_id: str) -> list[tuple[int, Any]]:
    rows = JournalRecord.objects.filter(session_id=call_id, kind="step").order_by("seq")
    return [(r.seq, r.result) for r in rows]


async def interrupted_in_its_step(
    runtime: ChatBridgeRuntime, office: Office, step: Any, call_id: str
) -> list[dict[str, Any]]:
    """Run the tool until the office has the step's request, then stop the process's hold on
    the call the way a shutdown does (parked: nothing ended on record); its journal on record."""
    manager: SessionManager = runtime.manager
    office.hold = asyncio.Event()
    session = await manager.create(ticket_tool(step), {}, call_id=call_id)
    await session.settled()
    await session.respond_to_elicit(session.pending.id, Accept(Pay(card="4242")))
    await office.reached.wait()
    await session.park()
    office.hold, office.reached = None, asyncio.Event()
    return await sync_to_async(journal_of)(call_id)


async def test_a_steps_start_is_on_record_before_its_side_effect(
    fresh_runtime: ChatBridgeRuntime,
) -> None:
    office = Office()
    seen: list[list[tuple[int, Any]]] = []

    async def looking(route: str, *, idempotency_key: str) -> str:
        seen.append(await sync_to_async(step_rows)("call-start"))
        return await office.issue(route, idempotency_key=idempotency_key)

    session = await fresh_runtime.manager.create(ticket_tool(looking), {}, call_id="call-start")
    await session.settled()
    await session.respond_to_elicit(session.pending.id, Accept(Pay(card="4242")))
    ended = await session.wait_finished()
    assert ended.type == "completed"
    [[(seq, result)]] = seen  # while the office worked, its start was on record, no result
    assert result is None
    assert office.calls == [f"call-start:{seq}"]  # the key: the call id and the step's seq
    assert ended.result == {"booked": True, "ticket": "T-JFK-LAX-1"}


async def test_an_interrupted_step_runs_again_with_the_same_key_and_issues_one_ticket(
    fresh_runtime: ChatBridgeRuntime,
) -> None:
    office = Office()
    journal = await interrupted_in_its_step(fresh_runtime, office, office.issue, "call-again")
    [started] = [e for e in journal if e["kind"] == "step"]
    assert started["started"] is True and started["result"] is None

    # Another run (a worker taking the call over) replays the answer and meets the step.
    resumed = await fresh_runtime.manager.create(
        ticket_tool(office.issue), {}, call_id="call-again", journal=journal
    )
    ended = await resumed.wait_finished()
    key = f"call-again:{started['seq']}"
    assert office.calls == [key, key]  # run again, with the key it had
    assert office.tickets == {key: "T-JFK-LAX-1"}  # one ticket for the world
    assert ended.type == "completed" and ended.result["ticket"] == "T-JFK-LAX-1"
    rows = await sync_to_async(step_rows)("call-again")
    assert rows == [(started["seq"], {"value": "T-JFK-LAX-1"})]  # its one row, finished


async def test_an_interrupted_step_without_a_key_is_not_run_again_and_the_payment_is_refunded(
    fresh_runtime: ChatBridgeRuntime,
) -> None:
    office = Office()
    journal = await interrupted_in_its_step(
        fresh_runtime, office, office.issue_unkeyed, "call-unkeyed"
    )
    resumed = await fresh_runtime.manager.create(
        ticket_tool(office.issue_unkeyed), {}, call_id="call-unkeyed", journal=journal
    )
    ended = await resumed.wait_finished()
    assert office.calls == [None]  # never run a second time
    assert ended.type == "failed"
    assert isinstance(ended.exception, StepOutcomeUnknown)
    assert "Step 'issue_ticket' of tool 'buy_ticket' started before" in ended.error
    assert ended.commitment is not None and ended.commitment.outcome == "compensated"
    [(_, refund_row)] = [
        (seq, result)
        for seq, result in await sync_to_async(step_rows)("call-unkeyed")
        if result is not None
    ]
    assert refund_row["value"]["refund"].startswith("R-call-unkeyed:")


async def test_a_tool_may_settle_an_unknown_step_by_its_key(
    fresh_runtime: ChatBridgeRuntime,
) -> None:
    office = Office()
    journal = await interrupted_in_its_step(
        fresh_runtime, office, office.issue_unkeyed, "call-settled"
    )

    async def settling(params: Route, ctx: ToolContext) -> dict[str, Any]:
        await ctx.elicit(PAY, message="Pay for the ticket")
        try:
            ticket = await ctx.step("issue_ticket", office.issue_unkeyed, params.route)
        except StepOutcomeUnknown as unknown:
            return {"booked": "ask the office", "key": unknown.key}
        return {"booked": True, "ticket": ticket}

    tool = create_mcp_tool("buy_ticket").parameters(Route).elicits(PAY).execute(settling)
    resumed = await fresh_runtime.manager.create(tool, {}, call_id="call-settled", journal=journal)
    ended = await resumed.wait_finished()
    [started] = [e for e in journal if e["kind"] == "step"]
    assert ended.type == "completed"
    assert ended.result == {"booked": "ask the office", "key": f"call-settled:{started['seq']}"}
    assert office.calls == [None]


def test_a_fork_abandons_a_steps_start_so_the_new_branch_gets_a_key_of_its_own() -> None:
    """A journal fork (an earlier answer changed) abandons the step's start: the step on the
    new branch is another step, with a seq (and so a key) of its own."""
    digest = "d" * 64
    journal = Journal(
        "buy_ticket",
        [
            {"seq": 1, "kind": "elicit", "key": "pay", "result": {"action": "accept"}, "pos": 1},
            {
                "seq": 2,
                "kind": "step",
                "key": "issue_ticket",
                "result": None,
                "pos": 2,
                "scope": "",
                "digest": digest,
                "started": True,
            },
        ],
    )
    assert journal.started("", 2, "issue_ticket", digest) is not None
    journal.fork(1)
    assert journal.started("", 2, "issue_ticket", digest) is None
    assert journal.next_seq() == 3  # after the abandoned start: never its key again


def test_a_started_step_replayed_as_another_step_diverges() -> None:
    journal = Journal(
        "buy_ticket",
        [
            {
                "seq": 1,
                "kind": "step",
                "key": "issue_ticket",
                "pos": 1,
                "scope": "",
                "digest": "d" * 64,
                "started": True,
            }
        ],
    )
    with pytest.raises(ReplayDivergence, match="with different args"):
        journal.started("", 1, "issue_ticket", "e" * 64)
    with pytest.raises(ReplayDivergence, match="the tool now called step 'refund'"):
        journal.started("", 1, "refund", "d" * 64)


async def test_a_step_that_raised_runs_again_on_replay_even_without_a_key(
    fresh_runtime: ChatBridgeRuntime,
) -> None:
    """A step function that raised did not return: on record so (its start notes the error),
    a replay runs it again, as it would have before steps' starts were recorded."""
    tries: list[int] = []

    def flaky(route: str) -> str:
        tries.append(len(tries) + 1)
        if len(tries) == 1:
            raise ConnectionError("the office hung up")
        return f"T-{route}"

    async def run(params: Route, ctx: ToolContext) -> dict[str, Any]:
        try:
            ticket = await ctx.step("issue_ticket", flaky, params.route)
        except ConnectionError:
            ticket = ""
        await ctx.elicit(PAY, message="Pay for the ticket")  # where the call is interrupted
        return {"ticket": ticket}

    tool = create_mcp_tool("buy_ticket").parameters(Route).elicits(PAY).execute(run)
    session = await fresh_runtime.manager.create(tool, {}, call_id="call-raised")
    await session.settled()
    await session.park()
    journal = await sync_to_async(journal_of)("call-raised")
    [started] = [e for e in journal if e["kind"] == "step"]
    assert started["started"] is True and started["result"] == {
        "raised": "ConnectionError: the office hung up"
    }
    resumed = await fresh_runtime.manager.create(tool, {}, call_id="call-raised", journal=journal)
    await resumed.settled()
    assert tries == [1, 2]  # run again on replay, and this time it returned
    assert resumed.pending is not None and resumed.pending.key == "pay"
    rows = await sync_to_async(step_rows)("call-raised")
    assert rows == [(started["seq"], {"value": "T-JFK-LAX"})]
    await resumed.park()
