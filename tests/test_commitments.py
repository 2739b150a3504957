"""Commitments (``.commits()``): once an answer that commits a call is on record, no abort ends
the call silently — it finishes, or runs its compensation, and says which."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from chatbridge import (
    Accept,
    ElicitKey,
    ElicitValidationError,
    SessionManager,
    ToolContext,
    TooManyRefusedAnswers,
    create_mcp_tool,
)
from chatbridge.author.exceptions import ToolDefinitionError
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.calls.commitment import COMPENSATION_SCOPE, abort_requested
from chatbridge.calls.links import MemoryUrlLinks
from tests.support import until_pause


class Paid(BaseModel):
    token: str


class Extra(BaseModel):
    note: str


class Params(BaseModel):
    after: Literal["finish", "ask", "fail"] = "finish"


PAY = ElicitKey("pay", Paid)
EXTRA = ElicitKey("extra", Extra)

tickets: list[str] = []
refunds: list[str] = []
holds: dict[str, asyncio.Event] = {}  # call id → released when the ticket may be issued
waiting: dict[str, asyncio.Event] = {}  # call id → set once its ticket step waits


async def issue(call_id: str) -> str:
    hold = holds.get(call_id)
    if hold is not None:
        waiting.setdefault(call_id, asyncio.Event()).set()
        await hold.wait()
    tickets.append(call_id)
    return f"T-{call_id}"


def refund(paid: Paid) -> dict[str, str]:
    refunds.append(paid.token)
    return {"refund": f"R-{paid.token}"}


async def body(params: Params, ctx: ToolContext) -> dict[str, Any]:
    paid = await ctx.elicit(PAY, message="Pay for it")
    if not paid.accepted:
        return {"paid": False}
    if params.after == "ask":
        await ctx.elicit(EXTRA, message="Anything to add?")
    ticket = await ctx.step("ticket", issue, ctx.call_id)
    if params.after == "fail":
        raise RuntimeError("the ticket printer is on fire")
    return {"ticket": ticket}


def build(*, compensate: bool = True) -> Any:
    builder = create_mcp_tool("shop").parameters(Params).elicits(PAY, EXTRA)
    if compensate:
        builder = builder.commits(PAY, compensate=refund, label="the payment")
    else:
        builder = builder.commits(PAY, label="the payment")
    return builder.execute(body)


shop = build()
shop_without_refunds = build(compensate=False)


@pytest.fixture
async def manager() -> AsyncIterator[SessionManager]:
    tickets.clear()
    refunds.clear()
    holds.clear()
    waiting.clear()
    mgr = SessionManager(sampler=LiteLLMSampler("offline/test"), url_links=MemoryUrlLinks())
    yield mgr
    for hold in holds.values():
        hold.set()
    await mgr.shutdown("test finished")


async def paid(manager: SessionManager, after: str = "finish", *, tool: Any = shop) -> Any:
    session = await manager.create(tool, {"after": after}, call_id="c1")
    assert (await until_pause(session))[-1][0] == "elicit"
    return session


def pay_id(call_id: str = "c1") -> str:
    return f"shop:pay:{call_id}:1"


async def test_an_abort_before_the_commitment_stops_the_call(manager: SessionManager) -> None:
    session = await paid(manager)
    assert await session.abort("changed my mind", by="user") == "aborted"
    ended = await session.wait_finished()
    assert (ended.type, ended.commitment) == ("aborted", None)
    assert (tickets, refunds) == ([], [])


async def test_an_abort_after_the_commitment_lets_the_call_finish(
    manager: SessionManager,
) -> None:
    holds["c1"] = asyncio.Event()
    session = await paid(manager)
    await session.respond_to_elicit(pay_id(), Accept({"token": "tok1"}))
    await waiting.setdefault("c1", asyncio.Event()).wait()  # the tool is in its ticket step
    assert session.commitment is not None and session.commitment.key == "pay"

    assert await session.abort("stop it", by="user") == "finishing"
    assert session.abort_requested == ("stop it", "user")
    holds["c1"].set()
    ended = await session.wait_finished()

    assert ended.type == "completed" and ended.result == {"ticket": "T-c1"}
    assert ended.commitment is not None
    assert (ended.commitment.outcome, ended.commitment.abort_by) == ("finished", "user")
    assert ended.commitment.text() == (
        "The payment was already received, so the call could not be stopped; it was finished "
        "after the request to stop."
    )
    assert (tickets, refunds) == (["c1"], [])


async def test_an_abort_right_after_the_answer_cannot_undo_it(manager: SessionManager) -> None:
    session = await paid(manager)
    await session.respond_to_elicit(pay_id(), Accept({"token": "tok1"}))
    # Nothing ran in between: the tool has not even resumed from its question.
    assert await session.abort("too late", by="operator ann") == "finishing"
    ended = await session.wait_finished()
    assert ended.type == "completed"
    assert (tickets, refunds) == (["c1"], [])


async def test_an_abort_at_a_later_question_stops_there_and_compensates(
    manager: SessionManager,
) -> None:
    session = await paid(manager, "ask")
    await session.respond_to_elicit(pay_id(), Accept({"token": "tok1"}))
    assert (await until_pause(session))[-1] == ("elicit", "shop:extra:c1:2", "Anything to add?")

    assert await session.abort("stop", by="user") == "compensating"
    ended = await session.wait_finished()

    assert ended.type == "aborted" and ended.reason == "stop"
    assert ended.commitment is not None
    assert ended.commitment.outcome == "compensated"
    assert ended.commitment.compensation == {"refund": "R-tok1"}
    assert ended.commitment.text() == (
        "The payment was undone after the request to stop: refund R-tok1."
    )
    assert (tickets, refunds) == ([], ["tok1"])
    [entry] = [e for e in session.journal if e.get("scope") == COMPENSATION_SCOPE]
    assert (entry["kind"], entry["key"], entry["result"]) == (
        "step",
        "compensate_pay",
        {"value": {"refund": "R-tok1"}},
    )


async def test_a_call_asked_to_stop_while_working_stops_at_its_next_question(
    manager: SessionManager,
) -> None:
    holds["c1"] = asyncio.Event()

    async def slow_extra(params: Params, ctx: ToolContext) -> dict[str, Any]:
        await ctx.elicit(PAY, message="Pay for it")
        await ctx.step("wait", issue, ctx.call_id)
        await ctx.elicit(EXTRA, message="Anything to add?")
        return {"done": True}

    builder = create_mcp_tool("shop").parameters(Params).elicits(PAY, EXTRA)
    tool = builder.commits(PAY, compensate=refund).execute(slow_extra)
    session = await paid(manager, tool=tool)
    await session.respond_to_elicit(pay_id(), Accept({"token": "tok1"}))
    assert await session.abort("stop", by="user") == "finishing"
    holds["c1"].set()
    ended = await session.wait_finished()
    assert ended.type == "aborted" and ended.commitment is not None
    assert ended.commitment.outcome == "compensated"
    assert refunds == ["tok1"]
    assert "elicit" not in [e.type for e in session.events]  # the question was never shown


async def test_a_failure_after_the_commitment_compensates(manager: SessionManager) -> None:
    session = await paid(manager, "fail")
    await session.respond_to_elicit(pay_id(), Accept({"token": "tok1"}))
    ended = await session.wait_finished()
    assert ended.type == "failed"
    assert ended.error == "RuntimeError: the ticket printer is on fire"
    assert ended.commitment is not None
    assert (ended.commitment.outcome, ended.commitment.abort_by) == ("compensated", None)
    assert ended.commitment.text() == "The payment was undone: refund R-tok1."
    assert refunds == ["tok1"]


async def test_a_committed_call_whose_later_answers_are_refused_too_often_compensates(
    manager: SessionManager,
) -> None:
    session = await paid(manager, "ask")
    await session.respond_to_elicit(pay_id(), Accept({"token": "tok1"}))
    await until_pause(session)
    for _ in range(4):
        with pytest.raises(ElicitValidationError):
            await session.respond_to_elicit("shop:extra:c1:2", Accept({"note": 5}))
    with pytest.raises(TooManyRefusedAnswers):
        await session.respond_to_elicit("shop:extra:c1:2", Accept({"note": 5}))
    ended = await session.wait_finished()
    assert ended.type == "failed" and ended.error.startswith(
        "TooManyRefusedAnswers: The answer to 'extra' was refused 5 times"
    )
    assert ended.commitment is not None
    assert ended.commitment.text() == "The payment was undone: refund R-tok1."
    assert (tickets, refunds) == ([], ["tok1"])


async def test_without_a_compensation_a_committed_question_stays_open(
    manager: SessionManager,
) -> None:
    session = await paid(manager, "ask", tool=shop_without_refunds)
    await session.respond_to_elicit(pay_id(), Accept({"token": "tok1"}))
    await until_pause(session)
    assert await session.abort("stop", by="user") == "kept"
    assert session.pending is not None and session.pending.key == "extra"
    await session.respond_to_elicit("shop:extra:c1:2", Accept({"note": "window seat"}))
    ended = await session.wait_finished()
    assert ended.type == "completed" and tickets == ["c1"]
    assert ended.commitment is not None and ended.commitment.outcome == "finished"


async def test_a_resumed_call_keeps_the_request_to_stop_and_compensates_once(
    manager: SessionManager,
) -> None:
    session = await paid(manager, "ask")
    await session.respond_to_elicit(pay_id(), Accept({"token": "tok1"}))
    await until_pause(session)
    journal = session.journal
    await session.park()

    # Another worker resumes it with the request to stop that was on record.
    requested = abort_requested({"abort_reason": "stop", "abort_by": "user"})
    resumed = await manager.create(
        shop, {"after": "ask"}, call_id="c1", journal=journal, abort_requested=requested
    )
    ended = await resumed.wait_finished()
    assert ended.type == "aborted" and ended.commitment is not None
    assert ended.commitment.outcome == "compensated" and refunds == ["tok1"]

    # Resumed once more (a crash after the refund): the refund is on record, not repeated.
    again = await manager.create(
        shop,
        {"after": "ask"},
        call_id="c1",
        journal=resumed.journal,
        abort_requested=requested,
    )
    ended = await again.wait_finished()
    assert ended.type == "aborted" and ended.commitment is not None
    assert ended.commitment.compensation == {"refund": "R-tok1"}
    assert refunds == ["tok1"]


async def test_expiry_after_the_commitment_compensates(manager: SessionManager) -> None:
    session = await paid(manager, "ask")
    await session.respond_to_elicit(pay_id(), Accept({"token": "tok1"}))
    await until_pause(session)
    assert await session.expire()
    ended = await session.wait_finished()
    assert ended.type == "aborted" and ended.commitment is not None
    assert (ended.commitment.outcome, ended.commitment.abort_by) == ("compensated", "expiry")
    assert refunds == ["tok1"]


async def test_a_declined_answer_commits_nothing(manager: SessionManager) -> None:
    session = await paid(manager)
    await session.respond_to_elicit(pay_id(), {"action": "decline"})
    ended = await session.wait_finished()
    assert ended.type == "completed" and ended.result == {"paid": False}
    assert ended.commitment is None


def test_a_commitment_on_a_key_the_tool_does_not_elicit_is_a_definition_error() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        create_mcp_tool("shop").parameters(Params).elicits(EXTRA).commits(PAY).execute(body)
    assert str(caught.value) == (
        "Tool 'shop' commits on 'pay', which it does not elicit; declared keys: extra. "
        "Add it to .elicits()."
    )
