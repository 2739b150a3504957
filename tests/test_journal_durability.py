"""Durability that cannot fail quietly: a journal write that fails, or that a worker no longer
holding the call attempts, stops the call before it acts on the answer (the real chat path)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import IntegrityError, connection

from chatbridge import create_mcp_tool
from chatbridge.calls.journal import JournalEntry
from chatbridge.engine.tool_message import NOT_QUOTED
from chatbridge.records.models import JournalRecord, Message, ToolSession
from chatbridge.records.recorder import WORKER_ID, DjangoRecorder
from chatbridge.records.writer import flush
from tests.chat_client import ChatClient
from tests.test_chat_socket import BOOK, free_seat

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]

TABLE = JournalRecord._meta.db_table
FAILURE = "journal storage failed (simulated)"


@pytest.fixture
async def chat() -> AsyncIterator[ChatClient]:
    client = await ChatClient.start()
    yield client
    await client.close()


def _execute(*statements: str) -> None:
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


@pytest.fixture
def broken_journal() -> Iterator[Any]:
    """An async function that makes every write to the journal table fail in the database."""
    if connection.vendor == "sqlite":
        breaks = [
            f"CREATE TRIGGER journal_broken_{op} BEFORE {op} ON {TABLE} "
            f"BEGIN SELECT RAISE(ABORT, '{FAILURE}'); END"
            for op in ("INSERT", "UPDATE")
        ]
        repairs = [f"DROP TRIGGER IF EXISTS journal_broken_{op}" for op in ("INSERT", "UPDATE")]
    elif connection.vendor == "postgresql":
        breaks = [
            "CREATE FUNCTION journal_broken() RETURNS trigger AS $$ BEGIN "
            f"RAISE EXCEPTION '{FAILURE}'; END $$ LANGUAGE plpgsql",
            f"CREATE TRIGGER journal_broken BEFORE INSERT OR UPDATE ON {TABLE} "
            "FOR EACH ROW EXECUTE FUNCTION journal_broken()",
        ]
        repairs = [
            f"DROP TRIGGER IF EXISTS journal_broken ON {TABLE}",
            "DROP FUNCTION IF EXISTS journal_broken()",
        ]
    else:  # pragma: no cover - the project runs on SQLite and PostgreSQL only
        pytest.skip(f"no way to break {connection.vendor} here")

    def break_journal() -> None:
        _execute(*breaks)

    yield sync_to_async(break_journal)
    _execute(*repairs)


async def to_seat_picker(chat: ChatClient) -> dict[str, Any]:
    """Book up to the seat picker (the first turn of a process may load the LLM: be patient)."""
    await chat.send_user(BOOK)
    flights = await chat.next("elicit", timeout=30, key="pick_flight")
    await chat.answer(flights, flight_id=flights["context"]["flights"][0]["id"])
    return await chat.next("elicit", timeout=30, key="pick_seat")


@sync_to_async
def transcript(conversation_id: str) -> list[str]:
    return [m.content for m in Message.objects.filter(conversation_id=conversation_id)]


@sync_to_async
def journal_keys(call_id: str) -> list[str]:
    return list(JournalRecord.objects.filter(session_id=call_id).values_list("key", flat=True))


@sync_to_async
def tool_session(call_id: str) -> ToolSession:
    return ToolSession.objects.get(pk=call_id)


async def test_a_failed_journal_write_stops_the_call_before_the_ticket(
    chat: ChatClient, broken_journal: Any
) -> None:
    seats = await to_seat_picker(chat)
    call_id = seats["call_id"]
    await broken_journal()  # the database refuses journal writes from now on
    row, letter = free_seat(seats)
    await chat.answer(seats, row=row, seat=letter)

    failed = await chat.next("tool_call", status="failed")
    # The driver's error class differs: IntegrityError on SQLite, ProgrammingError on PostgreSQL.
    error_class = "IntegrityError" if connection.vendor == "sqlite" else "ProgrammingError"
    expected = (
        f"JournalWriteFailed: The answer could not be recorded ({error_class}: {FAILURE}); "
        "the call was stopped so it never acts on an answer that is not on record."
    )
    assert failed["call_id"] == call_id and failed["error"] == expected
    await chat.next("assistant_message")  # the model was told and answered
    await chat.turn_done()
    await flush()

    messages = await transcript(chat.conversation_id)
    told = f"Error: The tool failed: {expected}{NOT_QUOTED}"
    assert told in messages  # what the model was told
    assert not any("CB-" in m for m in messages)  # no ticket anywhere in the conversation
    assert not [e for e in chat.events if e["type"] == "tool_call" and e["status"] == "completed"]
    assert "issue_ticket" not in await journal_keys(call_id)
    session = await tool_session(call_id)
    assert (session.status, session.error) == ("failed", expected)


async def test_a_worker_that_lost_the_call_stops_its_copy(chat: ChatClient) -> None:
    seats = await to_seat_picker(chat)
    call_id = seats["call_id"]
    await flush()  # the question's request is on record (a background write) before
    # another worker claims the call (as workers.py does on a takeover).
    await sync_to_async(ToolSession.objects.filter(pk=call_id).update)(worker="other-host:4242")
    row, letter = free_seat(seats)
    await chat.answer(seats, row=row, seat=letter)

    # The stale copy stops its turn and says nothing: the holder reports the call.
    await chat.turn_done()
    await flush()
    assert not [e for e in chat.events if e["type"] == "tool_call" and e["status"] != "running"]
    assert not [e for e in chat.events if e["type"] == "error"]

    messages = await transcript(chat.conversation_id)
    assert not any("CB-" in m for m in messages)
    assert not any("Error" in m for m in messages)  # no tool message for the call from here
    keys = await journal_keys(call_id)
    assert "issue_ticket" not in keys and "sample" not in keys
    # The stale copy wrote nothing over the new holder's record of the call.
    session = await tool_session(call_id)
    assert (session.worker, session.status, session.pending_key) == (
        "other-host:4242",
        "awaiting_elicit",
        "pick_seat",
    )
    seat_record = await sync_to_async(JournalRecord.objects.get)(
        session_id=call_id, key="pick_seat"
    )
    assert seat_record.result is None  # the answer is not on record as this worker's


@sync_to_async
def held_session(call_id: str) -> None:
    ToolSession.objects.create(id=call_id, tool_name="probe", worker=WORKER_ID)


async def test_a_journal_slot_is_written_once() -> None:
    await held_session("slot")
    recorder = DjangoRecorder()
    session: Any = SimpleNamespace(id="slot", commitment=None)
    await recorder.append(session, JournalEntry(1, "step", "charge", {"value": 1}, "2", 1, "d"))
    # A second writer of branch 2's first call (another seq: a stale copy) is refused.
    with pytest.raises(IntegrityError):
        await recorder.append(session, JournalEntry(2, "step", "charge", {"value": 2}, "2", 1, "d"))
    rows = [r async for r in JournalRecord.objects.filter(session_id="slot")]
    assert [(r.seq, r.scope, r.pos, r.result) for r in rows] == [(1, "2", 1, {"value": 1})]


@sync_to_async
def stored_before_scopes(call_id: str) -> list[dict[str, Any]]:
    """A call recorded before migration 0004: its rows have no scope, pos or digest."""
    from django.utils import timezone

    session = ToolSession.objects.create(id=call_id, tool_name="charge", worker=WORKER_ID)
    now = timezone.now()
    JournalRecord.objects.create(
        session=session, seq=1, kind="step", key="charge", result={"value": 7}, requested_at=now
    )
    return session.journal_entries()


async def test_rows_stored_before_scopes_replay_as_the_tool_body(manager: Any) -> None:
    entries = await stored_before_scopes("legacy")
    assert entries == [{"seq": 1, "kind": "step", "key": "charge", "result": {"value": 7}}]
    runs: list[int] = []

    async def body(params: Any, ctx: Any) -> Any:
        return await ctx.step("charge", runs.append, 99)  # other args: old rows have no digest

    tool = create_mcp_tool("charge").elicits().execute(body)
    session = await manager.create(tool, {}, call_id="legacy", journal=entries)
    assert (await session.wait_finished()).result == 7  # the recorded value, not run again
    assert runs == []
