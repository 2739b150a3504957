"""A call's lease (chatbridge/records/lease.py): the only writer of a call's owner, claimed by
compare-and-set, fencing every write, released with the outcome; and the two ways a worker
took a call another live worker held: starting it (the recorder wrote the owner whatever it
was) and a 2026-07-28 retry reaching a worker that did not hold the call (resumed unclaimed)."""

from __future__ import annotations

import ast
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from chatbridge import create_mcp_tool
from chatbridge.author.elicit import Accept
from chatbridge.author.exceptions import ClaimLost
from chatbridge.calls.events import FailedEvent
from chatbridge.calls.outcome import Aborted
from chatbridge.cluster.page_answers import deliver
from chatbridge.mcp.rounds import HELD_ELSEWHERE
from chatbridge.records import lease
from chatbridge.records.lease import WORKER_ID
from chatbridge.records.models import JournalRecord, ToolSession, WorkerHeartbeat, aborted_row
from chatbridge.records.writer import flush
from chatbridge.runtime import ChatBridgeRuntime
from tests.servers import free_port, migrated_env, start_daphne, start_each, stop
from tests.support import until_pause
from tests.test_mcp_tasks import TRIP, McpClient, RpcError, trip_answer

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
OTHER = "other-host:4242"  # another worker on the same database, alive while it beats

# -- the only writer ---------------------------------------------------------------------------

OWNER = "worker"
_MODEL_WRITES = {"create", "acreate", "get_or_create", "aget_or_create", "update_or_create"}
_MODEL_WRITES |= {"aupdate_or_create", "bulk_create", "abulk_create", "bulk_update"}


def _root(node: ast.expr) -> str:
    """The name a chain such as ``ToolSession.objects.filter(...).update`` starts from."""
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def owner_writes(source: str) -> list[int]:
    """Lines of ``source`` that write ``ToolSession.worker``: a queryset update (``lean_sql``'s
    keywords are its ``where``: a fence, not a write), a model
    created with it, a row dict of a module that writes ``ToolSession`` (``lean_sql``), an
    attribute assignment, ``setattr`` or ``update_fields``."""
    tree, rows = ast.parse(source), "ToolSession" in source
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            named = {k.arg for k in node.keywords}
            if OWNER in named and (
                (name in ("update", "aupdate") and _root(func) != "lean_sql")  # its: a where
                or (name in _MODEL_WRITES and _root(func) == "ToolSession")
                or name == "ToolSession"
            ):
                found.add(node.lineno)
            if name == "setattr" and any(
                isinstance(a, ast.Constant) and a.value == OWNER for a in node.args[1:2]
            ):
                found.add(node.lineno)
            for keyword in node.keywords:
                if keyword.arg == "update_fields" and OWNER in ast.unparse(keyword.value):
                    found.add(node.lineno)
        elif isinstance(node, ast.Dict) and rows:
            if any(isinstance(k, ast.Constant) and k.value == OWNER for k in node.keys):
                found.add(node.lineno)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and rows:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == OWNER for t in targets):
                found.add(node.lineno)
    return sorted(found)


def test_the_scan_finds_every_way_the_owner_was_written() -> None:
    # The writers before the lease: store's and the sweeper's claims, the recorder's start,
    # the task expiry's end; and the other ways Django writes a column.
    before = """
from chatbridge.records.models import ToolSession
ToolSession.objects.filter(pk=c, worker=w).update(worker=WORKER_ID, resumes=F("resumes") + 1)
fields = {"status": s, "worker": WORKER_ID}
lean_sql.update(ToolSession, fields, id=c)
ToolSession.objects.create(id=c, tool_name="t", worker=WORKER_ID)
row.worker = WORKER_ID
setattr(row, "worker", WORKER_ID)
row.save(update_fields=["worker"])
ToolSession(id=c, worker=w)
"""
    assert owner_writes(before) == [3, 4, 6, 7, 8, 9, 10]
    reads = """
from chatbridge.records.models import ToolSession
ToolSession.objects.filter(pk=c, worker=WORKER_ID).update(status="failed")
lean_sql.update(ToolSession, {"status": s}, id=c, worker=WORKER_ID)
WorkerHeartbeat.objects.update_or_create(worker=WORKER_ID, defaults={"beat_at": now})
holder = row.worker
"""
    assert owner_writes(reads) == []


def test_only_the_lease_writes_a_calls_owner() -> None:
    writes = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "chatbridge").rglob("*.py"))
        if "migrations" not in path.parts
        and (lines := owner_writes(path.read_text(encoding="utf-8")))
    }
    assert writes == {}, "write a call's owner through chatbridge.records.lease only"
    assert OWNER == lease._OWNER  # the column the scan looks for is the lease's


# -- claim, fence, release ---------------------------------------------------------------------


@sync_to_async
def _row(call_id: str, worker: str, status: str = "awaiting_elicit", **extra: Any) -> None:
    ToolSession.objects.create(id=call_id, tool_name="t", worker=worker, status=status, **extra)


@sync_to_async
def _owner(call_id: str) -> tuple[str, str, int]:
    row = ToolSession.objects.get(pk=call_id)
    return row.worker, row.status, row.resumes


async def test_a_claim_is_a_compare_and_set_on_the_holder_seen() -> None:
    await _row("c1", OTHER)
    claims = lease.CallLease()
    assert not await claims.claim("c1", "someone-else:1")  # not the holder seen
    assert await claims.claim("c1", OTHER)
    assert not await claims.claim("c1", OTHER)  # another claimant was quicker
    assert await _owner("c1") == (WORKER_ID, "awaiting_elicit", 1)
    await _row("done", OTHER, status="completed")
    assert not await claims.claim("done", OTHER)  # an ended call has no lease to take


async def test_the_fence_and_the_release_hold_only_while_the_call_is_held() -> None:
    await _row("mine", WORKER_ID)
    await _row("theirs", OTHER)
    await sync_to_async(lease.check)("mine")  # held here: no error
    with pytest.raises(ClaimLost) as lost:
        await sync_to_async(lease.check)("theirs")
    assert (lost.value.worker, lost.value.holder) == (WORKER_ID, OTHER)
    assert await sync_to_async(lease.release)("theirs", {"status": "completed"}) is False
    assert await sync_to_async(lease.release)("mine", {"status": "completed"}) is True
    assert await _owner("theirs") == (OTHER, "awaiting_elicit", 0)
    assert await _owner("mine") == (WORKER_ID, "completed", 0)  # the holder's name stays
    with pytest.raises(ValueError) as wrong:
        await sync_to_async(lease.release)("mine", {"status": "running"})
    assert str(wrong.value) == (
        "a call ends with status completed or failed or aborted, not 'running'"
    )


async def test_a_gone_workers_call_is_ended_once_and_a_committed_one_never() -> None:
    await _row("idle", OTHER)
    await _row("paid", OTHER, committed="payment")
    ended = Aborted(by="server", reason="expired")
    outcome = aborted_row(by="server", error="expired", now=timezone.now(), outcome=ended)
    claims = lease.CallLease()
    assert await claims.end("idle", OTHER, outcome)
    assert not await claims.end("idle", OTHER, outcome)
    assert not await claims.end("paid", OTHER, outcome)
    assert await _owner("idle") == (WORKER_ID, "aborted", 0)
    assert await _owner("paid") == (OTHER, "awaiting_elicit", 0)


# -- (a) starting a call another live worker holds ---------------------------------------------


@pytest.fixture
async def runtime(fresh_runtime: ChatBridgeRuntime) -> AsyncIterator[ChatBridgeRuntime]:
    """This process's runtime on a database another live worker (``OTHER``) shares."""
    await WorkerHeartbeat.objects.acreate(worker=OTHER, beat_at=timezone.now())
    yield fresh_runtime


async def test_resuming_a_call_another_live_worker_holds_does_not_take_it(
    runtime: ChatBridgeRuntime,
) -> None:
    charged: list[int] = []

    async def body(params: Any, ctx: Any) -> Any:
        return await ctx.step("charge", charged.append, 1)

    tool = create_mcp_tool("charge").elicits().execute(body)
    await _row("held", OTHER, status="running")
    # A copy started here without a claim (a path that forgot to claim, or a stale request).
    copy = await runtime.manager.create(tool, {}, call_id="held", journal=[])
    ended = await copy.wait_finished()
    await flush()
    assert isinstance(ended, FailedEvent), ended
    assert ended.error.startswith("ClaimLost: Another worker took this call over"), ended.error
    assert charged == []  # the step never ran here
    assert await _owner("held") == (OTHER, "running", 0)  # and the holder keeps its call
    assert not await JournalRecord.objects.filter(session_id="held").aexists()


async def test_a_page_answer_goes_to_the_holder_not_to_a_copy_that_lost_the_call(
    runtime: ChatBridgeRuntime,
) -> None:
    async def body(params: Any, ctx: Any) -> Any:
        return await ctx.elicit("ok", message="Fine?")

    from pydantic import BaseModel

    class Ok(BaseModel):
        fine: bool = True

    tool = create_mcp_tool("ask").elicits(ok=Ok).execute(body)
    copy = await runtime.manager.create(tool, {}, call_id="asked", meta={})
    assert (await until_pause(copy))[-1][0] == "elicit"
    assert copy.pending is not None
    await flush()
    # Another worker claimed the call meanwhile (this one's heartbeat looked stale).
    await sync_to_async(ToolSession.objects.filter(pk="asked").update)(worker=OTHER)
    holder = await lease.CallLease().holder("asked")  # as the page's answer was recorded
    answered = await deliver(
        runtime.manager, "asked", str(copy.pending.id), Accept(Ok()), holder=holder
    )
    assert answered is False  # OTHER did not take it (it is simulated): on record only
    assert copy.pending is not None  # the stale copy was not handed the answer
    await copy.abort("test finished")


# -- (b) a 2026-07-28 retry reaching a worker that does not hold the call ----------------------


def _held_by(database: Path, call_id: str) -> tuple[str, str, int, int]:
    with sqlite3.connect(database) as db:
        found = db.execute(
            "SELECT worker, status, resumes FROM chatbridge_chat_toolsession WHERE id = ?",
            (call_id,),
        ).fetchone()
        [(steps,)] = db.execute(
            "SELECT count(*) FROM chatbridge_chat_journalrecord WHERE session_id = ? "
            "AND kind = 'step'",
            (call_id,),
        )
    return found[0], found[1], found[2], steps


async def _round(client: McpClient, result: dict[str, Any]) -> dict[str, Any]:
    """Answer the open question of an ``input_required`` result: the next result."""
    [(key, request)] = result["inputRequests"].items()
    name = key.split(":")[1]
    params = {
        "name": "plan_trip",
        "arguments": TRIP,
        "inputResponses": {key: trip_answer(name)},
        "requestState": result["requestState"],
    }
    return dict(await client.rpc("tools/call", params, "plan_trip"))


@pytest.mark.slow
async def test_a_retry_reaching_a_worker_that_does_not_hold_the_call_is_refused(
    tmp_path: Path,
) -> None:
    database = tmp_path / "db.sqlite3"
    env = migrated_env(database, "tests.tasks_settings")
    env.pop("REDIS_URL", None)
    port_a, port_b = free_port(), free_port()
    a, b = start_each(lambda: start_daphne(port_a, env), lambda: start_daphne(port_b, env))
    try:
        async with httpx.AsyncClient() as http:
            on_a = McpClient(http, f"http://127.0.0.1:{port_a}/mcp", tasks=False)
            on_b = McpClient(http, f"http://127.0.0.1:{port_b}/mcp", tasks=False)
            first = await on_a.call("plan_trip", TRIP)
            assert first["resultType"] == "input_required"
            [call_id] = {
                r[0]
                for r in sqlite3.connect(database).execute(
                    "SELECT id FROM chatbridge_chat_toolsession"
                )
            }
            # The retry reaches B (round robin) while A, alive, holds the call.
            with pytest.raises(RpcError) as refused:
                await _round(on_b, first)
            assert refused.value.message == HELD_ELSEWHERE
            worker, status, resumes, steps = _held_by(database, call_id)
            assert (worker.endswith(f":{a.pid}"), status, resumes) == (True, "awaiting_elicit", 0)
            # Sent again, it reaches A, which runs the call to its end: the step once.
            result = await _round(on_a, first)
            while result.get("resultType") == "input_required":
                result = await _round(on_a, result)
    finally:
        stop(a, patience=60)  # it writes the call's end on its way out: never killed first
        stop(b)
    assert result["structuredContent"]["booked"] is True
    worker, status, resumes, steps = _held_by(database, call_id)
    assert (worker.endswith(f":{a.pid}"), status, resumes, steps) == (True, "completed", 0, 1)
