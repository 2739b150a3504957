"""Seed 002 at the JSON protocol: handoffs, two tools waiting at once, approvals, auto forms."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from chatbridge import PluginRegistry, SessionManager, create_mcp_tool, make_plugin
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.engine.engine import ChatHub
from chatbridge.engine.protocol import ChatEvent
from chatbridge.records.models import ToolSession
from chatbridge.records.writer import flush
from tests.chat_client import ChatClient
from tests.test_engine import MemoryStore, first_event

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]
ROOT = Path(__file__).resolve().parent.parent


async def test_pick_card_end_to_end() -> None:
    chat = await ChatClient.start()
    await chat.send_user("Pick a card")
    form = await chat.next("elicit", key="__handoff__")
    assert form["tool_name"] == "pick_card" and form["message"] == "Pick a card"
    cards = form["context"]["cards"]
    assert len(cards) == 5 and 'class="playing-card' in form["html"]
    await chat.answer(form, card="ZZ")
    again = await chat.next("elicit", key="__handoff__")
    assert again["errors"] == {"card": ["Pick one of the cards on the table."]}
    await chat.answer(again, card=cards[2]["code"])
    done = await chat.next("tool_call", status="completed")
    assert done["result"] == f"You picked the {cards[2]['name']}."
    assert (await chat.next("assistant_message"))["content"] == done["result"]
    await chat.close()


async def test_a_handoff_tool_and_an_mcp_tool_wait_at_the_same_time() -> None:
    chat = await ChatClient.start()
    await chat.send_user("Book a flight from JFK to LAX and pick a card")
    first = await chat.next("elicit")
    second = await chat.next("elicit")
    forms = {f["tool_name"]: f for f in (first, second)}
    assert set(forms) == {"book_flight", "pick_card"}
    states = [e for e in chat.events if e["type"] == "conversation_state"]
    assert sorted(states[-1]["pending"]) == sorted(f["call_id"] for f in forms.values())
    state = states[-1]
    assert state["phase"] == "plugin_awaiting_elicit"

    card = forms["pick_card"]["context"]["cards"][0]
    await chat.answer(forms["pick_card"], card=card["code"])  # answered second-asked first
    assert (await chat.next("tool_call", status="completed"))["tool_name"] == "pick_card"
    flights = forms["book_flight"]
    await chat.answer(flights, action="decline")
    assert (await chat.next("tool_call", status="completed"))["tool_name"] == "book_flight"
    reply = await chat.next("assistant_message")
    assert "You picked the" in reply["content"] or "did not go through" in reply["content"]
    await chat.turn_done()
    await chat.close()


async def test_approve_then_fill_the_auto_form_with_invalid_then_valid_input() -> None:
    chat = await ChatClient.start()
    await chat.send_user("Send feedback")
    request = await chat.next("approval_request")
    assert (request["tool_name"], request["arguments"]) == ("send_feedback", {})
    state = await chat.next("conversation_state", phase="awaiting_approval")
    assert [a["call_id"] for a in state["approvals"]] == [request["call_id"]]
    await chat.send({"type": "approve", "call_id": request["call_id"]})
    form = await chat.next("elicit", key="feedback")
    for widget in ('type="email"', 'type="date"', "<select", 'type="radio"', 'type="checkbox"'):
        assert widget in form["html"]
    await chat.answer(
        form, name="x", email="nope", visit_date="yesterday", rating="9", topic="rant"
    )
    again = await chat.next("elicit", key="feedback")
    assert set(again["errors"]) == {"name", "email", "visit_date", "rating", "topic"}
    await chat.answer(
        again,
        name="Ada",
        email="ada@example.org",
        visit_date="2026-11-20",
        rating="4",
        topic="praise",
        areas=["chat", "admin"],
        subscribe="true",
    )
    done = await chat.next("tool_call", status="completed")
    assert done["result"]["received"] is True and done["result"]["areas"] == ["chat", "admin"]
    assert done["result"]["reference"].startswith("FB-")
    await chat.close()


async def test_deny_tells_the_model_the_reason() -> None:
    chat = await ChatClient.start()
    await chat.send_user("Send feedback")
    request = await chat.next("approval_request")
    # The call is a session already, on record (the admin lists it) and waiting for approval.
    row = await ToolSession.objects.aget(pk=request["call_id"])
    assert (row.status, row.pending_key) == ("awaiting_elicit", "__approval__")
    await chat.send({"type": "deny", "call_id": request["call_id"], "reason": "not today"})
    denied = await chat.next("tool_call", status="denied")
    assert denied["error"] == "Denied by the user: not today"
    reply = await chat.next("assistant_message")
    await flush()  # the call's end is on record before the model's reply
    row = await ToolSession.objects.aget(pk=request["call_id"])
    assert (row.status, row.aborted_by, row.error) == ("aborted", "approval", denied["error"])
    assert reply["content"] == (
        "OK, I did not send the feedback, as you asked. Tell me if you change your mind."
    )
    await chat.send({"type": "approve", "call_id": request["call_id"]})  # changing one's mind
    assert (await chat.next("error"))["code"] == "ALREADY_ANSWERED"
    await chat.close()


async def test_several_approvals_are_kept_apart_by_call_id() -> None:
    runs: list[str] = []

    def gated(name: str):
        async def body(params: object, ctx: object) -> str:
            runs.append(name)
            return f"{name} ran"

        return make_plugin(create_mcp_tool(name).elicits().needs_approval().execute(body)).build()

    events: list[ChatEvent] = []

    async def sink(conversation_id: str, event: ChatEvent) -> None:
        events.append(event)

    manager = SessionManager(sampler=LiteLLMSampler("offline/approvals"))
    hub = ChatHub(
        registry=PluginRegistry([gated("alpha_task"), gated("beta_task")]),
        manager=manager,
        store=MemoryStore(),
        sink=sink,
        render_form=lambda *a, **k: "",
        model="offline/approvals",
    )
    await hub.user_message("c", "run the alpha task and the beta task")
    await first_event(events, "approval_request")
    while len([e for e in events if e.type == "approval_request"]) < 2:
        await asyncio.sleep(0.01)
    asked = {e.tool_name: e.call_id for e in events if e.type == "approval_request"}
    assert len(set(asked.values())) == 2
    assert sorted(a.tool_name for a in hub.state("c").approvals) == ["alpha_task", "beta_task"]
    await hub.decide("c", asked["beta_task"], False, "no")
    await hub.decide("c", asked["alpha_task"], True)
    await hub.wait_idle("c")
    assert runs == ["alpha_task"]
    outcomes = {
        e.tool_name: e.status for e in events if e.type == "tool_call" and e.status != "running"
    }
    assert outcomes == {"alpha_task": "completed", "beta_task": "denied"}
    await hub.close()
    await manager.shutdown()


def test_no_separate_state_or_events_for_handoffs() -> None:
    sources = [p.read_text() for p in (ROOT / "chatbridge").rglob("*.py")]
    sources += [p.read_text() for p in (ROOT / "chatbridge").rglob("*.html")]
    text = "\n".join(sources).lower()
    for word in (
        "pending_handoff",
        "tool_emission",
        "handoff_start",
        "handoff_response",
        "pluginelicitation",
        "plugin_elicit",
    ):
        assert word not in text, word
