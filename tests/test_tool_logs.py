"""A tool call's log lines and latest progress are kept with its session and shown again on
page load."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import cast

import pytest
from django.test import Client

from chatbridge.calls.events import LogEvent, ProgressEvent
from chatbridge.calls.sessions import PluginSession
from chatbridge.records.models import Conversation, Message, ToolSession
from chatbridge.records.recorder import MAX_LOG_LINES, WORKER_ID, DjangoRecorder
from chatbridge.records.writer import flush
from tests.chat_client import ChatClient

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.usefixtures("fresh_runtime")
async def test_logs_and_progress_of_a_call_are_recorded() -> None:
    chat = await ChatClient.start()
    await chat.send_user("Book a flight from JFK to LAX")
    await chat.next("elicit", key="pick_flight")
    await flush()
    row = await ToolSession.objects.aget(conversation_id=chat.conversation_id)
    assert row.logs == [
        {
            "level": "info",
            "message": "Searching flights",
            "data": {"origin": "JFK", "destination": "LAX"},
        }
    ]
    assert row.progress is not None and row.progress["progress"] == 1
    assert row.progress["total"] == 4 and row.progress["message"].startswith("Found ")
    await chat.close()


@pytest.mark.usefixtures("fresh_runtime")
async def test_only_the_last_log_lines_are_kept() -> None:
    chat = await ChatClient.start()
    row = await ToolSession.objects.acreate(
        id="c-many", conversation_id=chat.conversation_id, tool_name="t", worker=WORKER_ID
    )
    session = cast(PluginSession, SimpleNamespace(id=row.id))
    recorder = DjangoRecorder()
    for n in range(MAX_LOG_LINES + 20):
        await recorder.log_emitted(session, LogEvent(row.id, "info", f"line {n}", {"n": n}))
        if n % 7 == 0:
            await flush()
    await recorder.progress_emitted(session, ProgressEvent(row.id, "half", 1, 2))
    await flush()
    await row.arefresh_from_db()
    assert [line["message"] for line in row.logs] == [
        f"line {n}" for n in range(20, MAX_LOG_LINES + 20)
    ]
    assert row.progress == {"message": "half", "progress": 1, "total": 2}
    await chat.close()


def test_the_tool_card_shows_them_after_a_reload(client: Client) -> None:
    location = client.get("/")["Location"]
    conversation = Conversation.objects.get(pk=location.split("/")[2])
    Message.objects.create(
        id="m-1",
        conversation=conversation,
        seq=1,
        role="assistant",
        tool_calls=[
            {
                "id": "c-1",
                "type": "function",
                "function": {"name": "book_flight", "arguments": "{}"},
            }
        ],
    )
    ToolSession.objects.create(
        id="c-1",
        conversation=conversation,
        tool_name="book_flight",
        status="awaiting_elicit",
        logs=[{"level": "info", "message": "Searching <flights>", "data": {"origin": "JFK"}}],
        progress={"message": "Found 3 flights", "progress": 1, "total": 4},
    )
    page = client.get(location).content.decode()
    card = re.search(r'<article class="tool-card" id="tool-c-1".*?</article>', page, re.S)
    assert card is not None
    html = card.group(0)
    assert "Searching &lt;flights&gt;" in html and "Origin: JFK" in html
    assert re.search(r'<progress value="1(\.0)?" max="4(\.0)?"', html)
    assert "Found 3 flights" in html
