"""URL questions (``ctx.elicit_url``) in the core: links, page answers, journal and replay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from chatbridge import (
    Accept,
    AnswerRefused,
    Cancel,
    Decline,
    ElicitInBranch,
    ElicitKey,
    ElicitValidationError,
    LinkUnusable,
    PluginDefinitionError,
    SessionManager,
    ToolContext,
    answer_rule,
    create_mcp_tool,
    make_plugin,
)
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.calls.links import MemoryUrlLinks
from tests.support import until_pause


class Params(BaseModel):
    amount: int


class Paid(BaseModel):
    payment_token: str
    last4: str


async def pay(params: Params, ctx: ToolContext) -> dict[str, Any]:
    paid = await ctx.elicit_url("payment", message=f"Pay ${params.amount}", amount=params.amount)
    if not paid.accepted:
        return {"paid": False, "action": paid.action}
    receipt = await ctx.step("receipt", lambda: f"R-{paid.content.last4}")
    return {"paid": True, "last4": paid.content.last4, "receipt": receipt}


pay_tool = create_mcp_tool("pay").parameters(Params).elicits(payment=Paid).execute(pay)


@pytest.fixture
async def links() -> MemoryUrlLinks:
    return MemoryUrlLinks("https://shop.example")


@pytest.fixture
async def url_manager(links: MemoryUrlLinks) -> AsyncIterator[SessionManager]:
    manager = SessionManager(sampler=LiteLLMSampler("offline/test"), url_links=links)
    yield manager
    await manager.shutdown()


def token_of(url: str | None) -> str:
    assert url is not None and url.startswith("https://shop.example/elicit/")
    return url.rstrip("/").rsplit("/", 1)[1]


async def test_question_carries_mode_and_absolute_link(url_manager: SessionManager) -> None:
    session = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1")
    [(kind, elicit_id, message)] = await until_pause(session)
    assert (kind, elicit_id, message) == ("elicit", "pay:payment:c1:1", "Pay $30")
    request = session.pending
    assert request is not None and request.mode == "url"
    token_of(request.url)
    wire = request.to_dict()
    assert (wire["mode"], wire["url"]) == ("url", request.url)


async def test_page_answer_reaches_the_tool_and_is_journaled_without_the_link(
    url_manager: SessionManager, links: MemoryUrlLinks
) -> None:
    session = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1")
    await until_pause(session)
    url = session.pending.url
    await links.complete(token_of(url), Paid(payment_token="tok", last4="4242"), url_manager)
    [(kind, result)] = await until_pause(session)
    assert (kind, result) == ("completed", {"paid": True, "last4": "4242", "receipt": "R-4242"})
    assert session.answer_of("pay:payment:c1:1") == Accept(Paid(payment_token="tok", last4="4242"))
    entry = session.journal[0]
    assert (entry["kind"], entry["key"], entry["result"]) == (
        "elicit",
        "payment",
        {"action": "accept", "content": {"payment_token": "tok", "last4": "4242"}},
    )
    assert token_of(url) not in repr(session.journal)
    with pytest.raises(LinkUnusable, match="already used"):  # one time
        await links.complete(token_of(url), Paid(payment_token="t2", last4="1111"), url_manager)


class Counted(BaseModel):
    """A page's answer whose rule counts how often it runs."""

    runs: ClassVar[list[str]] = []
    last4: str

    @answer_rule("last4")
    def _digits(cls, last4: str, context: dict[str, Any]) -> None:
        cls.runs.append(last4)
        if not last4.isdigit():
            raise AnswerRefused("Four digits, please.")


async def pay_counted(params: Params, ctx: ToolContext) -> str:
    paid = await ctx.elicit_url("payment", message="Pay", amount=params.amount)
    return paid.content.last4 if paid.accepted else paid.action


async def test_a_page_answer_is_validated_once_on_its_way_to_the_tool(
    url_manager: SessionManager, links: MemoryUrlLinks
) -> None:
    counted = create_mcp_tool("pay_counted").parameters(Params).elicits(payment=Counted)
    session = await url_manager.create(counted.execute(pay_counted), {"amount": 5}, call_id="c9")
    await until_pause(session)
    token = token_of(session.pending.url)
    with pytest.raises(ElicitValidationError, match="Four digits"):
        await links.complete(token, {"last4": "abcd"}, url_manager)  # the page shows why
    await links.complete(token, {"last4": "4242"}, url_manager)
    assert await until_pause(session) == [("completed", "4242")]
    assert Counted.runs == ["abcd", "4242"]  # the link checked each; the question took it


async def test_replay_returns_the_recorded_answer_without_a_new_link(
    url_manager: SessionManager, links: MemoryUrlLinks
) -> None:
    first = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1")
    await until_pause(first)
    await links.complete(
        token_of(first.pending.url), {"payment_token": "tok", "last4": "4242"}, url_manager
    )
    await until_pause(first)
    journal = first.journal[:1]  # the answer, not the receipt: the step runs again
    fresh = MemoryUrlLinks("https://shop.example")
    manager = SessionManager(sampler=LiteLLMSampler("offline/test"), url_links=fresh)
    try:
        again = await manager.create(pay_tool, {"amount": 30}, call_id="c1", journal=journal)
        [(kind, result)] = await until_pause(again)
        assert (kind, result["last4"]) == ("completed", "4242")
        assert fresh._by_id == {}  # no link was handed out on replay
    finally:
        await manager.shutdown()


async def test_answer_reported_while_no_session_held_it_is_found_at_once(
    url_manager: SessionManager, links: MemoryUrlLinks
) -> None:
    session = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1")
    await until_pause(session)
    url = session.pending.url
    await session.park()  # the server restarts; the call stays suspended on record
    await links.complete(token_of(url), Paid(payment_token="tok", last4="4242"), url_manager)
    resumed = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1", journal=[])
    [(kind, result)] = await until_pause(resumed)  # no question shown: it was answered
    assert (kind, result["receipt"]) == ("completed", "R-4242")


async def test_same_question_keeps_its_link(url_manager: SessionManager) -> None:
    session = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1")
    await until_pause(session)
    url = session.pending.url
    await session.park()
    resumed = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1")
    await until_pause(resumed)
    assert resumed.pending.url == url


@pytest.mark.parametrize("answer", [Decline(), Cancel()])
async def test_decline_and_cancel_are_delivered_and_close_the_link(
    url_manager: SessionManager, links: MemoryUrlLinks, answer: Any
) -> None:
    session = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1")
    await until_pause(session)
    url = session.pending.url
    await session.respond_to_elicit("pay:payment:c1:1", answer)
    [(kind, result)] = await until_pause(session)
    assert (kind, result) == ("completed", {"paid": False, "action": answer.action})
    with pytest.raises(LinkUnusable, match="already used"):
        await links.complete(token_of(url), Paid(payment_token="t", last4="4242"), url_manager)


async def test_a_host_cannot_accept_a_url_question(url_manager: SessionManager) -> None:
    session = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1")
    await until_pause(session)
    with pytest.raises(ElicitValidationError, match="answered on its own page"):
        await session.respond_to_elicit(
            "pay:payment:c1:1", Accept({"payment_token": "x", "last4": "0000"})
        )
    assert session.status == "awaiting_elicit"


async def test_invalid_page_content_is_refused_and_the_link_stays_usable(
    url_manager: SessionManager, links: MemoryUrlLinks
) -> None:
    session = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1")
    await until_pause(session)
    token = token_of(session.pending.url)
    with pytest.raises(ElicitValidationError):
        await links.complete(token, {"last4": "4242"}, url_manager)
    await links.complete(token, {"payment_token": "t", "last4": "4242"}, url_manager)
    assert (await until_pause(session))[0][0] == "completed"


async def test_unknown_key_raises_before_anything_is_sent(url_manager: SessionManager) -> None:
    async def body(params: Params, ctx: ToolContext) -> None:
        await ctx.elicit_url("card", message="Pay")

    tool = create_mcp_tool("bad").parameters(Params).elicits(payment=Paid).execute(body)
    session = await url_manager.create(tool, {"amount": 1}, call_id="c1")
    [(kind, error)] = await until_pause(session)
    assert kind == "failed"
    assert error.startswith("UnknownElicitKey: Tool 'bad' elicited 'card'")


async def test_url_question_in_a_branch_raises(url_manager: SessionManager) -> None:
    caught: list[BaseException] = []

    async def inner(ctx: ToolContext) -> None:
        try:
            await ctx.elicit_url("payment", message="Pay")
        except ElicitInBranch as exc:
            caught.append(exc)

    async def body(params: Params, ctx: ToolContext) -> str:
        await ctx.branch(inner)
        return "done"

    tool = create_mcp_tool("branchy").parameters(Params).elicits(payment=Paid).execute(body)
    session = await url_manager.create(tool, {"amount": 1}, call_id="c1")
    assert await until_pause(session) == [("completed", "done")]
    assert len(caught) == 1


async def test_without_links_a_url_question_stops_the_call() -> None:
    manager = SessionManager(sampler=LiteLLMSampler("offline/test"))
    try:
        session = await manager.create(pay_tool, {"amount": 1}, call_id="c1")
        [(kind, error)] = await until_pause(session)
        assert kind == "failed" and error.startswith("UrlQuestionsUnavailable:")
        assert isinstance(session.journal, list) and session.journal == []
    finally:
        await manager.shutdown()


async def test_question_closed_resolves_when_the_page_answers(
    url_manager: SessionManager, links: MemoryUrlLinks
) -> None:
    session = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1")
    await until_pause(session)
    closed = asyncio.create_task(session.question_closed("pay:payment:c1:1"))
    await links.complete(
        token_of(session.pending.url), {"payment_token": "t", "last4": "1"}, url_manager
    )
    await closed
    answer = session.answer_of("pay:payment:c1:1")
    assert answer is not None and answer.accepted


async def page(request: Any, question: Any) -> Any:
    return None


def test_a_url_page_covers_its_key_in_a_plugin() -> None:
    plugin = make_plugin(pay_tool).on_url_page(payment=page).build()
    assert plugin.url_pages == {"payment": page}
    with pytest.raises(PluginDefinitionError, match="missing on_elicit handlers for payment"):
        make_plugin(pay_tool).build()
    with pytest.raises(PluginDefinitionError, match="handlers for undeclared keys other"):
        make_plugin(pay_tool).on_url_page(payment=page, other=page).build()


async def test_digest_covers_the_mode(url_manager: SessionManager, links: MemoryUrlLinks) -> None:
    async def form_body(params: Params, ctx: ToolContext) -> str:
        await ctx.elicit("payment", message=f"Pay ${params.amount}", amount=params.amount)
        return "x"

    session = await url_manager.create(pay_tool, {"amount": 30}, call_id="c1")
    await until_pause(session)
    await links.complete(
        token_of(session.pending.url), {"payment_token": "t", "last4": "1"}, url_manager
    )
    await until_pause(session)
    as_form = create_mcp_tool("pay").parameters(Params).elicits(payment=Paid).execute(form_body)
    replayed = await url_manager.create(
        as_form, {"amount": 30}, call_id="c2", journal=session.journal
    )
    [(kind, error)] = await until_pause(replayed)
    assert kind == "failed" and error.startswith("ReplayDivergence:")


PAYMENT = ElicitKey("payment", Paid)


async def pay_committed(params: Params, ctx: ToolContext) -> dict[str, Any]:
    paid = await ctx.elicit_url(PAYMENT, message=f"Pay ${params.amount}", amount=params.amount)
    if not paid.accepted:
        return {"paid": False}
    receipt = await ctx.step("receipt", lambda: f"R-{paid.content.last4}")
    return {"paid": True, "receipt": receipt}


committed_tool = (
    create_mcp_tool("pay_committed")
    .parameters(Params)
    .elicits(PAYMENT)
    .commits(PAYMENT, label="the payment")
    .execute(pay_committed)
)


class SlowToClose(MemoryUrlLinks):
    """Links whose ``close`` waits for ``release``: a database that is slow to answer."""

    def __init__(self) -> None:
        super().__init__("https://shop.example")
        self.closing, self.release = asyncio.Event(), asyncio.Event()

    async def close(self, request: Any) -> bool:
        self.closing.set()
        await self.release.wait()
        return await super().close(request)


async def test_a_call_that_ends_while_its_abort_closes_the_link_is_not_aborted_after_its_end() -> (
    None
):
    """The abort closes the payment link first; meanwhile the page pays and the call finishes.
    The abort then finds a call that ended: it says so ("ended"), and the record carries no
    request to stop that nobody was told about (an MCP client that cancelled was left with
    a finished booking and no word, under load, before)."""
    links = SlowToClose()
    manager = SessionManager(sampler=LiteLLMSampler("offline/test"), url_links=links)
    try:
        session = await manager.create(committed_tool, {"amount": 30}, call_id="c1")
        await until_pause(session)
        assert session.pending is not None
        abort = asyncio.create_task(session.abort("the client cancelled", by="client"))
        await links.closing.wait()  # the abort is closing the link
        await links.complete(
            token_of(session.pending.url), Paid(payment_token="t", last4="4242"), manager
        )
        ended = await session.wait_finished()
        assert ended.type == "completed" and ended.result["paid"] is True
        links.release.set()
        assert await abort == "ended"
        assert session.abort_requested is None
        assert ended.commitment is not None and ended.commitment.abort_by is None
    finally:
        await manager.shutdown()
