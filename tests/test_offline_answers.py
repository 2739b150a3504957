"""The fate of an answer that arrives at an awkward moment (the engine, no web stack).

A browser sends the answers given while it was offline when its socket is back: they may reach
a call whose question is being shown again (a resumed call), arrive twice (another tab, a copy
sent again after a lost acknowledgement), or be for a question that is gone. The first is
applied once shown, a second copy is taken quietly and never applied twice, and an answer for a
question that is really gone is refused with a message a person understands.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from chatbridge import ElicitAction, PluginRegistry, SessionManager, create_mcp_tool, make_plugin
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.engine.completion import ToolCallRequest
from chatbridge.engine.engine import ChatHub, CommandRefused
from chatbridge.engine.protocol import ChatEvent, ElicitResponseAck, ElicitResponseCommand
from tests.test_engine import MemoryStore, first_event


class Go(BaseModel):
    go: bool


class Size(BaseModel):
    size: str


class Gates:
    """The test opens ``drawn`` to let a form be drawn, and ``work`` to let the tool finish."""

    drawn = asyncio.Event()
    work = asyncio.Event()


async def two_questions(params: Any, ctx: Any) -> dict[str, Any]:
    go = await ctx.elicit("go", message="Start?")
    if not go.accepted:
        return {"started": False}
    size = await ctx.elicit("size", message="Which size?")
    await Gates.work.wait()
    return {"started": True, "size": size.content.size if size.accepted else None}


async def show_go(req: Any, ctx: Any) -> Any:
    await Gates.drawn.wait()  # drawing the form takes a while (a replay, a slow template)
    return (await ctx.render("go.html")).result


async def show_size(req: Any, ctx: Any) -> Any:
    return (await ctx.render("size.html")).result


async def careful(params: Any, ctx: Any) -> dict[str, Any]:
    return {"done": True}


careful_plugin = make_plugin(
    create_mcp_tool("careful").needs_approval().elicits().execute(careful)
).build()

slow_plugin = (
    make_plugin(create_mcp_tool("slow_form").elicits(go=Go, size=Size).execute(two_questions))
    .on_elicit(go=show_go, size=show_size)
    .build()
)


@pytest.fixture
async def hub() -> AsyncIterator[tuple[ChatHub, MemoryStore, list[ChatEvent]]]:
    events: list[ChatEvent] = []

    async def sink(conversation_id: str, event: ChatEvent) -> None:
        events.append(event)

    def render(
        request: Any, template_name: str, context: Any, errors: Any, *, session_id: str
    ) -> str:
        return f"<form>{template_name}</form>"

    Gates.drawn, Gates.work = asyncio.Event(), asyncio.Event()
    store = MemoryStore()
    manager = SessionManager(sampler=LiteLLMSampler("offline/engine"))
    chat = ChatHub(
        registry=PluginRegistry([slow_plugin, careful_plugin]),
        manager=manager,
        store=store,
        sink=sink,
        render_form=render,
        model="offline/engine",
    )
    yield chat, store, events
    await chat.close()
    await manager.shutdown()


def answer(form: Any, action: ElicitAction = "accept", **content: Any) -> ElicitResponseCommand:
    return ElicitResponseCommand(
        type="elicit_response",
        session_id=form.call_id,
        call_id=form.call_id,
        elicit_id=form.elicit_id,
        action=action,
        content=content,
    )


async def test_an_answer_that_arrives_before_its_form_is_drawn_waits_for_it(hub: Any) -> None:
    chat, _, events = hub
    Gates.work.set()
    call = asyncio.create_task(
        chat.execute_tool_call("c", ToolCallRequest("s1", "slow_form", "{}"))
    )
    asked = await first_event(events, "elicit_start")  # the question is open, its form not drawn
    assert chat.state("c").pending == ["s1"]
    # The answer queued by an offline browser arrives now: it used to be refused at once
    # ("This question is not waiting for an answer.") and had to be given again.
    sending = asyncio.create_task(chat.elicit_response("c", answer(asked, go="true")))
    await asyncio.sleep(0)  # it reaches the hub before the form is drawn
    assert not sending.done()
    Gates.drawn.set()
    await asyncio.wait_for(sending, 5)
    await asyncio.wait_for(_until(lambda: _form(events, "size") is not None), 5)
    await chat.elicit_response("c", answer(_form(events, "size"), size="L"))
    assert json.loads(await call) == {"started": True, "size": "L"}
    assert not [e for e in events if e.type == "error"]


async def test_a_second_copy_of_an_answer_is_taken_quietly_and_applied_once(hub: Any) -> None:
    chat, _, events = hub
    Gates.drawn.set()
    call = asyncio.create_task(
        chat.execute_tool_call("c", ToolCallRequest("s2", "slow_form", "{}"))
    )
    go = await first_event(events, "elicit")
    first = answer(go, go="true")
    await chat.elicit_response("c", first)
    await chat.elicit_response("c", first)  # a double click, or a copy sent again: no error
    await asyncio.wait_for(_until(lambda: _form(events, "size") is not None), 5)
    await chat.elicit_response("c", first)  # later, while the next question is open
    size = _form(events, "size")
    await chat.elicit_response("c", answer(size, size="M"))
    await chat.elicit_response("c", answer(size, size="M"))  # the tool works on: still quiet
    Gates.work.set()
    assert json.loads(await call) == {"started": True, "size": "M"}
    await chat.elicit_response("c", answer(size, size="M"))  # the call is over: still quiet
    acks = [e for e in events if isinstance(e, ElicitResponseAck)]
    done = [e for e in events if e.type == "elicit_complete"]
    assert [a.elicit_id for a in acks] == [go.elicit_id, size.elicit_id]  # each taken once
    assert [d.elicit_id for d in done] == [go.elicit_id, size.elicit_id]  # and applied once
    assert chat.manager.get("s2") is None


async def test_an_answer_for_a_question_that_is_gone_gets_a_human_message(hub: Any) -> None:
    chat, store, events = hub
    Gates.drawn.set()
    call = asyncio.create_task(
        chat.execute_tool_call("c", ToolCallRequest("s3", "slow_form", "{}"))
    )
    go = await first_event(events, "elicit")
    await chat.elicit_response("c", answer(go, "decline"))
    assert json.loads(await call) == {"started": False}
    # Another tab answers the same question differently, after it was declined.
    with pytest.raises(CommandRefused) as refused:
        await chat.elicit_response("c", answer(go, go="true"))
    assert str(refused.value) == "That question was already declined, so this answer was not used."

    # After a restart nothing is remembered but the transcript: the call has ended.
    store.messages_by_conv["old"] = [
        {"role": "user", "content": "Start"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "s9",
                    "type": "function",
                    "function": {"name": "slow_form", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "s9", "content": '{"started": false}'},
    ]
    with pytest.raises(CommandRefused) as gone:
        await chat.elicit_response(
            "old",
            ElicitResponseCommand(
                type="elicit_response",
                session_id="s9",
                call_id="s9",
                elicit_id="slow_form:go:s9:1",
                content={"go": "true"},
            ),
        )
    assert gone.value.code == "CLOSED"
    assert str(gone.value) == (
        "That question is closed: its tool call has already finished, so this answer was not used."
    )


def _form(events: list[ChatEvent], key: str) -> Any:
    return next((e for e in events if e.type == "elicit" and e.key == key), None)


async def _until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0.01)


async def test_a_decision_sent_while_its_call_is_resumed_waits_and_a_copy_is_quiet(
    hub: Any,
) -> None:
    chat, _, events = hub
    with chat._held("c") as conv:  # the call is being resumed by replay
        shown = conv.resuming["a1"] = asyncio.Event()
    # The approval given offline arrives before the replay shows the prompt again: it waits.
    deciding = asyncio.create_task(chat.decide("c", "a1", True))
    await asyncio.sleep(0)
    assert not deciding.done()
    call = asyncio.create_task(chat.execute_tool_call("c", ToolCallRequest("a1", "careful", "{}")))
    await asyncio.wait_for(deciding, 5)
    assert shown.is_set()
    assert json.loads(await call) == {"done": True}
    await chat.decide("c", "a1", True)  # a second copy: quiet
    with pytest.raises(CommandRefused) as refused:
        await chat.decide("c", "a1", False)
    assert str(refused.value) == "That tool call was already approved, so this was not used."
    assert not [e for e in events if e.type == "error"]
