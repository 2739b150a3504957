"""The chat engine without any web stack: an in-memory store and sink, the offline model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from chatbridge import (
    PluginRegistry,
    SessionManager,
    create_mcp_tool,
    make_plugin,
)
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.engine.completion import ToolCallRequest
from chatbridge.engine.engine import LOST_SESSION_MESSAGE, ChatHub, CommandRefused, dangling_calls
from chatbridge.engine.protocol import ChatEvent, ElicitResponseCommand
from plugins.book_flight.plugin import book_flight_plugin


async def first_event(events: list[ChatEvent], kind: str, timeout: float = 10) -> Any:
    async def wait() -> Any:
        while True:
            found = next((e for e in events if e.type == kind), None)
            if found is not None:
                return found
            await asyncio.sleep(0.01)

    return await asyncio.wait_for(wait(), timeout)


class MemoryStore:
    def __init__(self) -> None:
        self.messages_by_conv: dict[str, list[dict[str, Any]]] = {}
        self.phases: list[str] = []

    async def messages(self, conversation_id: str) -> list[dict[str, Any]]:
        return [dict(m) for m in self.messages_by_conv.get(conversation_id, [])]

    async def append(
        self, conversation_id: str, message_id: str, message: dict[str, Any], *, wait: bool = True
    ) -> None:
        self.messages_by_conv.setdefault(conversation_id, []).append(message)

    async def save_phase(self, conversation_id: str, phase: Any) -> None:
        self.phases.append(phase)

    async def fork(
        self, conversation_id: str, message_id: str, *, edit: bool
    ) -> tuple[list[str], list[str]]:
        raise CommandRefused("BAD_COMMAND", "this store keeps no message ids: no forks")

    async def resumable(self, conversation_id: str) -> list[Any]:
        return []  # nothing survives a restart in memory

    async def claim(self, call_id: str, worker: str) -> bool:
        return False


class Broken(BaseModel):
    n: int


async def explode(params: Broken, ctx: Any) -> None:
    raise RuntimeError("the booking system is down")


broken_plugin = make_plugin(
    create_mcp_tool("broken").parameters(Broken).elicits().execute(explode)
).build()


class Go(BaseModel):
    go: bool


class LongJob:
    """The job ``long_job`` does after its question; a test sets a fresh gate and opens it."""

    gate = asyncio.Event()


async def ask_then_work(params: Any, ctx: Any) -> dict[str, Any]:
    await ctx.elicit("go", message="Start the long job?")
    await LongJob.gate.wait()
    return {"done": True}


async def show_go(req: Any, ctx: Any) -> Any:
    return (await ctx.render("go.html")).result


long_job_plugin = (
    make_plugin(create_mcp_tool("long_job").elicits(go=Go).execute(ask_then_work))
    .on_elicit(go=show_go)
    .build()
)


@pytest.fixture
async def hub() -> AsyncIterator[tuple[ChatHub, MemoryStore, list[ChatEvent]]]:
    events: list[ChatEvent] = []

    async def sink(conversation_id: str, event: ChatEvent) -> None:
        events.append(event)

    def render(
        request: Any, template_name: str, context: dict[str, Any], errors: Any, *, session_id: str
    ) -> str:
        return f"<form>{template_name}</form>"

    store = MemoryStore()
    manager = SessionManager(sampler=LiteLLMSampler("offline/engine"))
    chat = ChatHub(
        registry=PluginRegistry([book_flight_plugin, broken_plugin, long_job_plugin]),
        manager=manager,
        store=store,
        sink=sink,
        render_form=render,
        model="offline/engine",
    )
    yield chat, store, events
    await chat.close()
    await manager.shutdown()


async def test_tool_problems_become_tool_messages_for_the_model(hub: Any) -> None:
    chat, _, events = hub
    run = chat.execute_tool_call
    assert await run("c", ToolCallRequest("1", "fly_to_mars", "{}")) == (
        "Error: Unknown tool 'fly_to_mars'. Available tools: book_flight, broken, long_job."
    )
    assert (await run("c", ToolCallRequest("2", "broken", "{nope"))).startswith(
        "Error: Arguments for tool 'broken' are not valid JSON:"
    )
    assert await run("c", ToolCallRequest("3", "broken", "[1]")) == (
        "Error: Arguments for tool 'broken' must be a JSON object."
    )
    assert await run("c", ToolCallRequest("4", "broken", '{"n": "x"}')) == (
        "Error: Invalid arguments for tool 'broken': n: Input should be a valid integer, unable "
        "to parse string as an integer. Call it again with arguments matching its parameters "
        "schema."
    )
    assert await run("c", ToolCallRequest("5", "broken", '{"n": 1}')) == (
        "Error: The tool failed: RuntimeError: the booking system is down (Tell the user in "
        "plain words that it did not work; do not quote this error.)"
    )
    statuses = [(e.call_id, e.status) for e in events if e.type == "tool_call"]
    assert statuses == [("4", "failed"), ("5", "running"), ("5", "failed")]


async def test_a_turn_walks_the_phases_and_answers_through_the_plugin(hub: Any) -> None:
    chat, store, events = hub
    await chat.user_message("conv", "Book a flight from JFK to LAX")
    form = await first_event(events, "elicit")
    assert form.html == "<form>book_flight/flight_list.html</form>"
    assert chat.state("conv").phase == "plugin_awaiting_elicit"
    assert chat.pending_forms("conv") == [form]
    await chat.elicit_response(
        "conv",
        ElicitResponseCommand(
            type="elicit_response",
            session_id=form.session_id,
            call_id=form.call_id,
            elicit_id=form.elicit_id,
            action="cancel",
        ),
    )
    await chat.wait_idle("conv")
    assert store.phases[:4] == [
        "process_plugin_abort",
        "process_plugin_responses",
        "start_iteration",
        "streaming",
    ]
    assert "executing_tools" in store.phases and store.phases[-1] == "done"
    roles = [m["role"] for m in store.messages_by_conv["conv"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    tool_message = store.messages_by_conv["conv"][2]
    assert json.loads(tool_message["content"]) == {
        "booked": False,
        "reason": "flight selection cancelled",
    }


async def test_dangling_calls_are_recovered_as_lost_sessions(hub: Any) -> None:
    chat, store, events = hub
    store.messages_by_conv["conv"] = [
        {"role": "user", "content": "Book a flight from JFK to LAX"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_old",
                    "type": "function",
                    "function": {
                        "name": "book_flight",
                        "arguments": '{"origin": "JFK", "destination": "LAX"}',
                    },
                }
            ],
        },
    ]
    assert dangling_calls(store.messages_by_conv["conv"]) == ["call_old"]
    await chat.elicit_response(
        "conv",
        ElicitResponseCommand(
            type="elicit_response",
            session_id="call_old",
            call_id="call_old",
            elicit_id="book_flight:pick_flight:call_old:1",
            content={"flight_id": "SH-1"},
        ),
    )
    form = await first_event(events, "elicit")
    lost = next(e for e in events if e.type == "session_error")
    assert (lost.error, lost.call_id) == ("SESSION_NOT_FOUND", "call_old")
    assert store.messages_by_conv["conv"][2] == {
        "role": "tool",
        "tool_call_id": "call_old",
        "content": LOST_SESSION_MESSAGE,
        # Beside it on record, off what the model reads: how the call ended, for its card.
        "outcome": {
            "kind": "failed",
            "error_type": "",
            "message": "The tool session was lost.",
            "refused": None,
        },
    }
    assert form.call_id != "call_old"  # the model retried with a new call


async def test_unknown_calls_are_refused(hub: Any) -> None:
    from chatbridge.engine.engine import CommandRefused

    chat, _, _ = hub
    with pytest.raises(CommandRefused, match="No tool call 'x' in this conversation."):
        await chat.elicit_response(
            "conv",
            ElicitResponseCommand(
                type="elicit_response", session_id="x", call_id="x", elicit_id="t:k:x:1"
            ),
        )
    with pytest.raises(CommandRefused, match="No running tool 'x' in this conversation."):
        await chat.abort("conv", "x", "why")


async def test_an_answer_for_a_live_call_between_questions_is_refused_at_once(hub: Any) -> None:
    from chatbridge.engine.engine import CommandRefused

    chat, _, events = hub
    LongJob.gate = asyncio.Event()
    call = asyncio.create_task(chat.execute_tool_call("c", ToolCallRequest("j1", "long_job", "{}")))
    form = await first_event(events, "elicit")
    answer = ElicitResponseCommand(
        type="elicit_response",
        session_id=form.session_id,
        call_id=form.call_id,
        elicit_id=form.elicit_id,
        content={"go": True},
    )
    await chat.elicit_response("c", answer)
    await first_event(events, "elicit_complete")  # the tool works on; no question is open
    assert chat.state("c").pending == [] and chat.manager.get("j1") is not None
    # The same answer again (a double click): taken quietly at once, not after waiting for a
    # question that never comes (the bound is only there to fail; the old wait was 10 s).
    await asyncio.wait_for(chat.elicit_response("c", answer), 5)
    # Another answer to it is refused at once, in words.
    with pytest.raises(CommandRefused) as refused:
        other = answer.model_copy(update={"content": {"go": False}})
        await asyncio.wait_for(chat.elicit_response("c", other), 5)
    assert (refused.value.code, str(refused.value)) == (
        "ALREADY_ANSWERED",
        "That question was already answered, so this answer was not used.",
    )
    assert not call.done()
    LongJob.gate.set()
    assert json.loads(await call) == {"done": True}


async def test_a_message_while_a_reconnecting_socket_checks_for_calls_to_resume_is_not_busy(
    hub: Any,
) -> None:
    """Sockets call recover() as they connect; a message sent meanwhile used to get BUSY."""
    chat, store, events = hub
    checking, release = asyncio.Event(), asyncio.Event()

    async def slow_resumable(conversation_id: str) -> list[Any]:
        checking.set()
        await release.wait()  # the database is slow to say there is nothing to resume
        return []

    store.resumable = slow_resumable
    recovering = asyncio.create_task(chat.recover("c"))
    await checking.wait()
    # Created before the check is released, the message's task runs first (tasks start in
    # order): it reaches the hub while the check is still under way.
    sending = asyncio.create_task(chat.user_message("c", "Hello there"))
    release.set()
    assert await recovering is False
    await sending  # no CommandRefused("BUSY")
    await chat.wait_idle("c")
    assert [e.type for e in events][:1] == ["user_message"], [e.type for e in events]


async def test_a_hub_that_is_closing_starts_no_turn(hub: Any) -> None:
    chat, _, events = hub
    await chat.close()  # the process is shutting down
    with pytest.raises(CommandRefused) as refused:
        await chat.user_message("c", "Hello there")
    assert refused.value.code == "SHUTTING_DOWN"
    assert "restarting" in str(refused.value)
    assert await chat.recover("c") is False
    assert events == []
