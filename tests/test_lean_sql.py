"""The writer's lean statements store exactly what the ORM stores (JSON, datetimes, UUIDs,
defaults, NULL conditions), on SQLite here and on PostgreSQL in CI."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from chatbridge.records import lean_sql
from chatbridge.records.models import Conversation, JournalRecord, Message, ToolSession
from tests.test_services import migrated_postgres_url, run_django  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)

AT = datetime(2026, 11, 23, 12, 30, 15, 123456, tzinfo=UTC)


def exercise() -> dict[str, object]:
    """Writes through lean_sql, read back through the ORM (also run on PostgreSQL)."""
    conversation = Conversation.objects.create(owner="session:lean")
    ToolSession.objects.create(id="call-1", conversation=conversation, tool_name="t", worker="w")
    ToolSession.objects.create(id="call-2", conversation=conversation, tool_name="t", worker="w")
    ToolSession.objects.filter(pk="call-2").update(ended_at=AT)
    changed = lean_sql.update(
        ToolSession,
        {"status": "awaiting_elicit", "pending_context": {"seats": ["1A", "2B"], "n": 1.5},
         "pending_since": AT, "pending_schema": None},
        id="call-1", worker="w",
    )  # fmt: skip
    missed = lean_sql.update(ToolSession, {"status": "failed"}, id="call-1", worker="other")
    live = lean_sql.update(
        ToolSession, {"phase": "executing_tools"}, conversation_id=conversation.id, ended_at=None
    )
    renamed = lean_sql.update(Conversation, {"phase": "done"}, id=conversation.id)
    lean_sql.insert(
        JournalRecord,
        {"session_id": "call-1", "seq": 0, "kind": "elicit", "key": "pick_seat",
         "request": {"message": "Pick — a seat"}, "requested_at": AT},
    )  # fmt: skip
    found = lean_sql.select(JournalRecord, ("seq", "result"), session_id="call-1", seq=0)
    lean_sql.update(JournalRecord, {"result": {"action": "accept", "n": [1, 2]}}, seq=0)
    lean_sql.insert(
        JournalRecord,
        {"session_id": "call-1", "seq": 1, "kind": "step", "key": "k", "requested_at": AT,
         "scope": "", "pos": 1},
    )  # fmt: skip
    listed = lean_sql.rows(JournalRecord, ("seq", "result", "request"), "seq", session_id="call-1")
    locked = lean_sql.select(ToolSession, ("pending_context",), for_update=True, id="call-1")
    top = lean_sql.max_of(JournalRecord, "seq", session_id="call-1")
    none = lean_sql.max_of(JournalRecord, "seq", session_id="call-2")
    nothing = lean_sql.select(JournalRecord, ("seq",), session_id="call-1", seq=9)
    row = ToolSession.objects.get(pk="call-1")
    record = JournalRecord.objects.get(session_id="call-1", seq=0)
    return {
        "counts": [changed, missed, live, renamed],
        "status": row.status,
        "context": row.pending_context,
        "schema": row.pending_schema,
        "since": row.pending_since.isoformat() if row.pending_since else None,
        "phases": sorted(
            ToolSession.objects.filter(conversation=conversation).values_list("phase", flat=True)
        ),
        "conversation_phase": Conversation.objects.get(pk=conversation.id).phase,
        "record": [record.kind, record.key, record.request, record.result, record.rejected,
                   record.elicit_id, record.scope, record.requested_at.isoformat()],
        "found": list(found) if found else None,
        "nothing": nothing,
        "listed": [list(r) for r in listed],
        "locked": list(locked) if locked else None,
        "max": [top, none],
    }  # fmt: skip


EXPECTED = {
    "counts": [1, 0, 1, 1],
    "status": "awaiting_elicit",
    "context": {"seats": ["1A", "2B"], "n": 1.5},
    "schema": None,
    "since": AT.isoformat(),
    "phases": ["", "executing_tools"],
    "conversation_phase": "done",
    "record": [
        "elicit", "pick_seat", {"message": "Pick — a seat"},
        {"action": "accept", "n": [1, 2]}, [], "",
        JournalRecord._meta.get_field("scope").get_default(), AT.isoformat(),
    ],
    "found": [0, None],
    "nothing": None,
    "listed": [
        [0, {"action": "accept", "n": [1, 2]}, {"message": "Pick — a seat"}],
        [1, None, {}],
    ],
    "locked": [{"seats": ["1A", "2B"], "n": 1.5}],
    "max": [1, None],
}  # fmt: skip


def test_lean_statements_store_what_the_orm_stores_on_sqlite() -> None:
    assert exercise() == EXPECTED


def on_postgresql(function: str, url: str) -> object:
    """What ``tests.test_lean_sql.<function>()`` returns, run on a migrated PostgreSQL
    database in a process of its own (as JSON)."""
    out = run_django(
        "import json\n"
        f"from tests.test_lean_sql import {function}\n"
        f"print(json.dumps({function}()))\n",
        DATABASE_URL=url,
    )
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.services
def test_lean_statements_store_what_the_orm_stores_on_postgresql(
    migrated_postgres_url: str,  # noqa: F811 (the fixture)
) -> None:
    assert on_postgresql("exercise", migrated_postgres_url) == json.loads(json.dumps(EXPECTED))


def upserts() -> dict[str, object]:
    """The one-statement writes: an insert that keeps a row already there, or replaces some of
    its columns while another is NULL; a row numbered after the last (also on PostgreSQL)."""
    conversation = Conversation.objects.create(owner="session:lean")
    first = {
        "conversation_id": conversation.id,
        "tool_name": "t",
        "worker": "w",
        "status": "running",
    }
    new = lean_sql.insert(ToolSession, {"id": "call-1", **first}, unless=("id",))
    again = lean_sql.insert(ToolSession, {"id": "call-1", **first, "worker": "x"}, unless=("id",))
    asked = {"session_id": "call-1", "seq": 0, "kind": "elicit", "key": "pick_seat",
             "request": {"message": "Pick"}, "requested_at": AT}  # fmt: skip
    replace = ("key", "request")
    written = lean_sql.insert(
        JournalRecord, asked, unless=("session_id", "seq"), else_set=replace, while_null="result"
    )
    asked_again = {**asked, "request": {"message": "Pick again"}}
    replaced = lean_sql.insert(
        JournalRecord, asked_again, unless=("session_id", "seq"), else_set=replace,
        while_null="result",
    )  # fmt: skip
    JournalRecord.objects.filter(session_id="call-1", seq=0).update(result={"action": "accept"})
    kept = lean_sql.insert(
        JournalRecord, {**asked, "request": {"message": "late"}}, unless=("session_id", "seq"),
        else_set=replace, while_null="result",
    )  # fmt: skip
    numbered = []
    for n, (message_id, calls) in enumerate([("m1", None), ("m2", [{"id": "c"}]), ("m1", None)]):
        row = {"id": message_id, "conversation_id": conversation.id, "role": "user",
               "content": f"text {n}", "tool_calls": calls, "created_at": AT}  # fmt: skip
        numbered.append(lean_sql.append_numbered(Message, row, "seq", "conversation_id", "id"))
    record = JournalRecord.objects.get(session_id="call-1", seq=0)
    return {
        "inserted": [new, again, ToolSession.objects.get(pk="call-1").worker],
        "journal": [written, replaced, kept, record.request, record.key],
        "numbered": numbered,
        "messages": [
            [m.id, m.seq, m.content, m.tool_calls, m.created_at.isoformat()]
            for m in Message.objects.filter(conversation=conversation).order_by("seq")
        ],
    }


UPSERTS = {
    "inserted": [1, 0, "w"],
    "journal": [1, 1, 0, {"message": "Pick again"}, "pick_seat"],
    "numbered": [1, 1, 0],
    "messages": [
        ["m1", 1, "text 0", None, AT.isoformat()],
        ["m2", 2, "text 1", [{"id": "c"}], AT.isoformat()],
    ],
}


def test_one_statement_upserts_on_sqlite() -> None:
    assert upserts() == UPSERTS


@pytest.mark.services
def test_one_statement_upserts_on_postgresql(migrated_postgres_url: str) -> None:  # noqa: F811
    assert on_postgresql("upserts", migrated_postgres_url) == json.loads(json.dumps(UPSERTS))


def json_text() -> dict[str, object]:
    """A step's result handed over as its JSON text (made once, when the result was checked)
    is stored as the same value written as a dict: JSON numbers, non-ASCII text, nesting, and
    a NUL scrubbed as a dict's would be (also on PostgreSQL, whose jsonb refuses NUL)."""
    conversation = Conversation.objects.create(owner="session:lean")
    ToolSession.objects.create(id="call-1", conversation=conversation, tool_name="t", worker="w")
    values = [{"value": {"seat": "1A", "price": 461.5, "n": [1, 2], "who": "Zoë"}},
              {"value": "a\u0000b"}, {"value": None}]  # fmt: skip
    stored = []
    for seq, value in enumerate(values):
        for given in (value, lean_sql.JsonText(json.dumps(value))):
            lean_sql.insert(
                JournalRecord,
                {"session_id": "call-1", "seq": seq, "kind": "step", "key": "k",
                 "requested_at": AT, "scope": "", "pos": seq + 1},
                unless=("session_id", "seq"),
            )  # fmt: skip
            lean_sql.update(JournalRecord, {"result": given}, session_id="call-1", seq=seq)
            stored.append(JournalRecord.objects.get(session_id="call-1", seq=seq).result)
    return {"stored": stored}


JSON_TEXT = {
    "stored": [
        {"value": {"seat": "1A", "price": 461.5, "n": [1, 2], "who": "Zoë"}},
        {"value": {"seat": "1A", "price": 461.5, "n": [1, 2], "who": "Zoë"}},
        {"value": "a\ufffdb"},
        {"value": "a\ufffdb"},
        {"value": None},
        {"value": None},
    ]
}


def test_json_text_is_stored_as_its_value_on_sqlite() -> None:
    assert json_text() == JSON_TEXT


@pytest.mark.services
def test_json_text_is_stored_as_its_value_on_postgresql(migrated_postgres_url: str) -> None:  # noqa: F811
    assert on_postgresql("json_text", migrated_postgres_url) == json.loads(json.dumps(JSON_TEXT))
