"""The chat pages and the HTML side of the socket: ownership, CSRF, escaping, fragments."""

from __future__ import annotations

import importlib
import json
import re

import pytest
from django.apps import apps as django_apps
from django.test import Client

from chatbridge.calls.outcome import (
    OUTCOME,
    Aborted,
    Completed,
    Declined,
    Denied,
    Failed,
    Outcome,
    call_status,
    describe,
)
from chatbridge.engine.tool_message import ToolReply, failed_reply
from chatbridge.records.models import Conversation, Message, ToolSession
from tests.chat_client import html_socket

pytestmark = pytest.mark.django_db(transaction=True)


def test_home_starts_a_conversation_and_shows_the_composer(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert re.fullmatch(r"/c/[0-9a-f-]{36}/", response["Location"])
    page = client.get(response["Location"]).content.decode()
    assert '<label for="message-box">Message</label>' in page
    assert 'ws-connect="/ws/chat/' in page
    # Collected static files under hashed names, so browsers may cache them for good.
    assert re.search(r'src="/static/django_htmx/htmx-2\.min\.[0-9a-f]{12}\.js"', page)
    assert re.search(r'src="/static/django_htmx/ext/hx-ws-2\.min\.[0-9a-f]{12}\.js"', page)
    assert client.get("/")["Location"] == response["Location"]  # the same one next time


def test_another_browsers_conversation_is_not_found(client: Client) -> None:
    other = Conversation.objects.create(owner="session:someone-else")
    assert client.get(f"/c/{other.id}/").status_code == 404


def test_new_chat_needs_a_csrf_token() -> None:
    browser = Client(enforce_csrf_checks=True)
    page = browser.get(browser.get("/")["Location"]).content.decode()
    assert browser.post("/c/new/").status_code == 403
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    response = browser.post("/c/new/", {"csrfmiddlewaretoken": token.group(1)})
    assert response.status_code == 302
    assert Conversation.objects.count() == 1  # the empty chat is reused (see test_sidebar)


def _card(page: str, call_id: str) -> str:
    match = re.search(rf'<article class="tool-card" id="tool-{call_id}".*?</article>', page, re.S)
    assert match is not None, f"no card for {call_id}"
    return match.group(0)


def test_tool_cards_take_their_status_from_the_call_record(client: Client) -> None:
    owner = client.get("/")["Location"]
    conversation = Conversation.objects.get(pk=owner.split("/")[2])
    # What each call's tool message said, and how its session row recorded that it ended. The
    # words of a message do not decide the card: a tool may well return text that starts with
    # "Error:".
    operator = Aborted(by="operator", who="ops", reason="disk full, please retry")
    calls: dict[str, tuple[Outcome | None, str, str]] = {
        "c-done": (Completed(result={"ticket": "T-1"}), "", "Error: none, all good"),
        "c-failed": (Failed(error_type="RuntimeError", message="boom"), "", "Error: boom"),
        "c-denied": (Denied(reason="no"), "approval", "Error: The user denied this tool call"),
        "c-aborted": (Aborted(by="server", reason="stop"), "server", "Error: aborted: stop"),
        "c-mine": (Aborted(by="user"), "user", "Stopped by the user: the user stopped it."),
        "c-ops": (operator, "operator ops", "Stopped by an operator: ..."),
        "c-declined": (
            Declined(key="pick_seat", result={"booked": False, "reason": "seat declined"}),
            "",
            '{"booked": false, "reason": "seat declined"}',
        ),
        "c-lost": (None, "", "Error: Unknown tool 'nope'. Available tools: book_flight."),
        "c-retained": (None, "", "Error: all good"),  # retention removed its row
    }
    # A call without a session row: the outcome kept beside its tool message decides.
    kept = {
        "c-lost": failed_reply("Unknown tool 'nope'. Available tools: book_flight."),
        "c-retained": ToolReply("Error: all good", Completed(result={"ticket": "T-2"})),
    }
    Message.objects.create(
        id="m-0",
        conversation=conversation,
        seq=0,
        role="assistant",
        tool_calls=[
            {"id": cid, "type": "function", "function": {"name": "look_up", "arguments": "{}"}}
            for cid in calls
        ],
    )
    for seq, (cid, (outcome, aborted_by, content)) in enumerate(calls.items(), start=1):
        Message.objects.create(
            id=f"m-{seq}",
            conversation=conversation,
            seq=seq,
            role="tool",
            tool_call_id=cid,
            content=content,
            outcome=kept[cid].message(cid)["outcome"] if cid in kept else None,
        )
        if outcome is not None:
            returned = isinstance(outcome, Completed | Declined)
            ToolSession.objects.create(
                id=cid,
                conversation=conversation,
                tool_name="look_up",
                status={"completed": "completed", "failed": "failed"}.get(
                    call_status(outcome), "aborted"
                ),
                aborted_by=aborted_by,
                result=outcome.result if isinstance(outcome, Completed | Declined) else None,
                error="" if returned else describe(outcome),
                outcome=outcome.model_dump(mode="json"),
            )
    page = client.get(owner).content.decode()
    done = _card(page, "c-done")
    assert ">Done</span>" in done and "T-1" in done and "all good" not in done
    # The badge tells what happened; the exception text stays in the record and the logs.
    failed = _card(page, "c-failed")
    assert ">Failed</span>" in failed and "boom" not in failed
    assert "Something went wrong on our side" in failed
    denied = _card(page, "c-denied")
    assert ">Denied</span>" in denied and "You did not allow this to run" in denied
    aborted = _card(page, "c-aborted")
    assert ">Stopped</span>" in aborted and "stopped before it finished" in aborted
    mine = _card(page, "c-mine")
    assert ">Stopped by you</span>" in mine and "You stopped this" in mine
    ops = _card(page, "c-ops")
    assert ">Stopped by an operator</span>" in ops
    assert "An operator stopped this: disk full, please retry" in ops
    declined = _card(page, "c-declined")
    assert ">Declined</span>" in declined and ">Done<" not in declined
    lost = _card(page, "c-lost")  # never became a session
    assert ">Failed</span>" in lost and "Unknown tool" not in lost
    retained = _card(page, "c-retained")
    assert ">Done</span>" in retained and "T-2" in retained and "all good" not in retained


def test_tool_messages_written_before_outcomes_were_kept_get_theirs_once(client: Client) -> None:
    owner = client.get("/")["Location"]
    conversation = Conversation.objects.get(pk=owner.split("/")[2])
    said = {
        "c-old-lost": "Error: Unknown tool 'nope'.",
        "c-old-done": '{"ticket": "T-3"}',
        "c-old-text": "plain words",
        "c-recorded": "Error: the session row tells",
    }
    for seq, (cid, content) in enumerate(said.items()):
        Message.objects.create(
            id=f"old-{seq}",
            conversation=conversation,
            seq=seq,
            role="tool",
            tool_call_id=cid,
            content=content,
        )
    ToolSession.objects.create(id="c-recorded", conversation=conversation, tool_name="look_up")
    migration = importlib.import_module("chatbridge.chat.migrations.0019_message_outcome")
    migration.keep_outcomes(django_apps, None)
    outcomes = {
        m.tool_call_id: m.outcome and OUTCOME.validate_python(m.outcome)
        for m in Message.objects.filter(conversation=conversation)
    }
    assert outcomes == {
        "c-old-lost": Failed(error_type="", message="Unknown tool 'nope'."),
        "c-old-done": Completed(result={"ticket": "T-3"}),
        "c-old-text": Completed(result="plain words"),
        "c-recorded": None,  # its session row says how it ended
    }


@pytest.mark.usefixtures("fresh_runtime")
async def test_htmx_forms_work_and_everything_is_escaped() -> None:
    socket = await html_socket()
    hostile = "<script>alert(1)</script> book a flight from <b>JFK</b> to <img src=x>"
    await socket.send_to(
        text_data=json.dumps(
            {"command": "user_message", "text": hostile, "HEADERS": {"HX-Request": "true"}}
        )
    )
    fragments: list[str] = []
    while not any('name="flight_id"' in f for f in fragments):
        fragments.append(await socket.receive_from(timeout=10))
    html = "\n".join(fragments)
    assert "<script>alert(1)</script>" not in html and "<img src=x>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;JFK&lt;/b&gt;" in html  # the tool's arguments, as the model passed them
    assert 'hx-swap-oob="beforeend:#transcript"' in html
    form = next(f for f in fragments if 'name="flight_id"' in f)
    assert 'hx-swap-oob="true"' in form and 'id="elicit-' in form
    ids = dict(re.findall(r'name="(session_id|call_id|elicit_id)" value="([^"]+)"', form))
    await socket.send_to(
        text_data=json.dumps(
            {"command": "elicit_response", **ids, "action": "decline", "HEADERS": {}}
        )
    )
    done: list[str] = []
    while not any("Declined" in f for f in done):
        done.append(await socket.receive_from(timeout=10))
    await socket.disconnect()
