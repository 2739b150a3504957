"""The rules of ``ctx``: declared keys, one question at a time, no questions in branches."""

from __future__ import annotations

import asyncio
from typing import Any

from chatbridge import Accept, SessionManager, create_mcp_tool
from tests.support import Confirm, PickHotel, until_pause


def probe(body: Any, **elicits: Any) -> Any:
    return create_mcp_tool("probe").elicits(**(elicits or {"pick_hotel": PickHotel})).execute(body)


async def test_undeclared_key_fails_before_anything_is_sent(manager: SessionManager) -> None:
    async def body(params: Any, ctx: Any) -> None:
        await ctx.elicit("pick_room", message="Which room?")

    session = await manager.create(
        probe(body, pick_hotel=PickHotel, confirm=Confirm), {}, call_id="u"
    )
    assert await until_pause(session) == [
        (
            "failed",
            "UnknownElicitKey: Tool 'probe' elicited 'pick_room', which it did not declare; "
            "declared keys: confirm, pick_hotel. Add it to .elicits().",
        )
    ]
    assert session.journal == []


async def test_second_concurrent_elicit_raises(manager: SessionManager) -> None:
    errors: list[str] = []

    async def body(params: Any, ctx: Any) -> str:
        first = asyncio.ensure_future(ctx.elicit("pick_hotel", message="Which hotel?"))
        await asyncio.sleep(0)
        try:
            await ctx.elicit("confirm", message="Sure?")
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        answer = await first
        return answer.content.hotel

    session = await manager.create(
        probe(body, pick_hotel=PickHotel, confirm=Confirm), {}, call_id="p"
    )
    assert await until_pause(session) == [("elicit", "probe:pick_hotel:p:1", "Which hotel?")]
    assert errors == [
        "ElicitAlreadyPending: Tool 'probe' elicited 'confirm' while elicitation "
        "probe:pick_hotel:p:1 is still pending; a tool call has at most one pending "
        "elicitation. Await each ctx.elicit() before starting the next."
    ]
    await session.respond_to_elicit("probe:pick_hotel:p:1", Accept({"hotel": "Inn"}))
    assert await until_pause(session) == [("completed", "Inn")]


async def test_elicit_in_a_branch_raises_at_any_depth(manager: SessionManager) -> None:
    errors: list[str] = []
    depths: list[int] = []

    async def deep(bctx: Any) -> None:
        depths.append(bctx.depth)
        try:
            await bctx.elicit("pick_hotel", message="Which?")
        except Exception as exc:
            errors.append(str(exc))

    async def shallow(bctx: Any) -> None:
        depths.append(bctx.depth)
        await bctx.branch(deep)

    async def body(params: Any, ctx: Any) -> str:
        depths.append(ctx.depth)
        await ctx.branch(shallow)
        return "done"

    session = await manager.create(probe(body), {}, call_id="b")
    assert await until_pause(session) == [("completed", "done")]
    assert depths == [0, 1, 2]
    assert errors == [
        "Tool 'probe' elicited 'pick_hotel' inside a branch (depth 2); branches are sub-agent "
        "computations and cannot ask the user. Elicit in the tool body (depth 0) and pass the "
        "answer into the branch."
    ]


async def test_sample_works_inside_branches_and_returns_the_branch_value(
    manager: SessionManager,
) -> None:
    async def summarise(bctx: Any, city: str) -> str:
        tip = await bctx.sample(f"One short travel tip for {city}.", max_tokens=8)
        return tip.text

    async def body(params: Any, ctx: Any) -> str:
        return await ctx.branch(summarise, "Rome")

    session = await manager.create(probe(body), {}, call_id="s")
    [(kind, text)] = await until_pause(session)
    assert kind == "completed"
    assert "Rome" in text and len(text.split()) <= 8
    assert [e["kind"] for e in session.journal] == ["sample"]


async def test_bad_log_and_progress_arguments_are_refused(manager: SessionManager) -> None:
    async def body(params: Any, ctx: Any) -> list[str]:
        problems = []
        for call in (
            ctx.log("loud", "x"),
            ctx.notify("x", progress=-1),
            ctx.notify("x", progress="half"),
            ctx.log("info", "x", when=object()),
            ctx.elicit("pick_hotel", message="m", extra=object()),
        ):
            try:
                await call
            except (TypeError, ValueError) as exc:
                problems.append(str(exc).split(";")[0])
        return problems

    session = await manager.create(probe(body), {}, call_id="l")
    [(kind, problems)] = await until_pause(session)
    assert kind == "completed"
    assert problems == [
        "log level must be one of debug, info, notice, warning, error, critical, alert, emergency",
        "progress must be a non-negative number, got -1",
        "progress must be a non-negative number, got 'half'",
        "Log data must be JSON-serialisable, got dict: Unable to serialize unknown type: "
        "<class 'object'>. Return plain dicts, lists, strings, numbers, booleans, None or "
        "pydantic models.",
        "The context of elicitation 'pick_hotel' must be JSON-serialisable, got dict: Unable to "
        "serialize unknown type: <class 'object'>. Return plain dicts, lists, strings, numbers, "
        "booleans, None or pydantic models.",
    ]


async def test_context_accepts_pydantic_models_and_sends_plain_json(
    manager: SessionManager,
) -> None:
    async def body(params: Any, ctx: Any) -> None:
        await ctx.elicit(
            "pick_hotel", message="Which?", choice=PickHotel(hotel="Inn"), ui={"mode": "modal"}
        )

    session = await manager.create(probe(body), {}, call_id="m")
    await until_pause(session)
    assert session.pending is not None
    assert session.pending.context == {"choice": {"hotel": "Inn"}}
    assert session.pending.ui == {"mode": "modal"}
    assert session.pending.wire_message == (
        'Which?\n\n--x-model-context: application/json\n{"choice":{"hotel":"Inn"}}'
    )
