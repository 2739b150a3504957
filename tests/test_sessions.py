"""A tool with two questions, a sample, logs, progress and a step, driven through sessions."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from chatbridge import (
    Accept,
    Cancel,
    Decline,
    DuplicateSession,
    ElicitId,
    ElicitNotPending,
    ElicitValidationError,
    InvalidToolParams,
    SessionManager,
    SessionNotFound,
    create_mcp_tool,
)
from chatbridge.author.exceptions import ClaimLost
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.calls.journal import JournalEntry, MemoryJournalStore
from tests.support import HOTELS, PickHotel, bookings_made, trip_tool, until_pause

HOTEL_Q = "Which hotel in Lisbon?"
CONFIRM_Q = "Book Harbour Inn for 2 nights?"


def hotel_id(call_id: str = "call-1") -> str:
    return f"plan_trip:pick_hotel:{call_id}:1"


async def start(manager: SessionManager, call_id: str = "call-1") -> Any:
    return await manager.create(trip_tool, {"city": "Lisbon", "nights": 2}, call_id=call_id)


async def test_accept_path_runs_end_to_end_with_exact_events(manager: SessionManager) -> None:
    before = len(bookings_made)
    session = await start(manager)
    assert (session.id, session.call_id, session.tool_name) == ("call-1", "call-1", "plan_trip")

    assert await until_pause(session) == [
        ("log", "info", "Planning a trip", {"city": "Lisbon"}),
        ("progress", "Looking for hotels", 1, 3),
        ("elicit", hotel_id(), HOTEL_Q),
    ]
    assert session.status == "awaiting_elicit"
    assert session.pending is not None
    assert session.pending.context == {"hotels": HOTELS}
    assert session.pending.schema.json["x-model-context"] == {"hotels": HOTELS}
    assert session.pending.params == {"city": "Lisbon", "nights": 2}

    await session.respond_to_elicit(hotel_id(), Accept({"hotel": "Harbour Inn"}))
    assert await until_pause(session) == [("elicit", "plan_trip:confirm:call-1:2", CONFIRM_Q)]

    await session.respond_to_elicit(
        ElicitId("plan_trip", "confirm", "call-1", 2), Accept({"ok": True})
    )
    assert await until_pause(session) == [
        ("progress", "Booking", 2, 3),
        ("elicit", "plan_trip:rate:call-1:3", "How was the booking experience?"),
    ]
    await session.respond_to_elicit(
        "plan_trip:rate:call-1:3", {"action": "accept", "content": {"stars": 5}}
    )
    events = await until_pause(session)
    result = events[-1][1]
    assert events == [("progress", "Done", 3, 3), ("completed", result)]
    assert result["booked"] is True and result["stars"] == 5
    assert result["booking"] == bookings_made[-1] and len(bookings_made) == before + 1
    assert "Lisbon" in result["tip"]
    assert session.status == "completed"
    assert manager.get("call-1") is None  # cleaned up on completion
    assert [(e["seq"], e["kind"], e["key"]) for e in session.journal] == [
        (1, "elicit", "pick_hotel"),
        (2, "sample", "sample"),
        (3, "elicit", "confirm"),
        (4, "step", "book_room"),
        (5, "elicit", "rate"),
    ]
    assert session.journal[1]["result"]["text"] == result["tip"]
    assert session.journal[1]["result"]["model"] == "offline/test"


async def test_decline_path_reaches_the_tool_as_decline(manager: SessionManager) -> None:
    session = await start(manager)
    await until_pause(session)
    await session.respond_to_elicit(hotel_id(), Decline())
    assert await until_pause(session) == [("completed", {"booked": False, "reason": "decline"})]
    [entry] = session.journal
    assert {k: entry[k] for k in ("seq", "kind", "key", "result", "scope", "pos")} == {
        "seq": 1,
        "kind": "elicit",
        "key": "pick_hotel",
        "result": {"action": "decline"},
        "scope": "",
        "pos": 1,
    }


async def test_cancel_path_reaches_the_tool_as_cancel(manager: SessionManager) -> None:
    session = await start(manager)
    await until_pause(session)
    await session.respond_to_elicit(hotel_id(), {"action": "cancel"})
    assert await until_pause(session) == [("completed", {"booked": False, "reason": "cancel"})]
    assert session.status == "completed"


async def test_tool_receives_a_validated_model_instance(manager: SessionManager) -> None:
    seen: list[object] = []

    async def body(params: Any, ctx: Any) -> str:
        answer = await ctx.elicit("pick_hotel", message="Which?")
        seen.append(answer)
        return "ok"

    tool = create_mcp_tool("probe").elicits(pick_hotel=PickHotel).execute(body)
    session = await manager.create(tool, {}, call_id="c")
    await until_pause(session)
    await session.respond_to_elicit("probe:pick_hotel:c:1", Accept({"hotel": "Harbour Inn"}))
    await until_pause(session)
    assert seen == [Accept(PickHotel(hotel="Harbour Inn"))]


async def test_invalid_answer_raises_and_the_question_stays_pending(
    manager: SessionManager,
) -> None:
    session = await start(manager)
    await until_pause(session)
    with pytest.raises(ElicitValidationError) as info:
        await session.respond_to_elicit(hotel_id(), Accept({"hotel": 42}))
    assert str(info.value) == (
        "Answer to plan_trip:pick_hotel:call-1:1 does not match PickHotel: "
        "hotel: Input should be a valid string. "
        "The elicitation is still pending; answer it again with valid content."
    )
    assert info.value.field_errors() == {"hotel": ["Enter some text"]}
    technical = [m.technical for m in info.value.field_errors()["hotel"]]  # type: ignore[attr-defined]
    assert technical == ["Input should be a valid string"]
    assert session.status == "awaiting_elicit"
    assert session.pending is not None and str(session.pending.id) == hotel_id()
    assert session.journal == []

    await session.respond_to_elicit(hotel_id(), Accept({"hotel": "Grand Central"}))
    assert await until_pause(session) == [
        ("elicit", "plan_trip:confirm:call-1:2", "Book Grand Central for 2 nights?")
    ]


async def test_malformed_action_is_a_validation_error(manager: SessionManager) -> None:
    session = await start(manager)
    await until_pause(session)
    with pytest.raises(ElicitValidationError, match="action: action must be one of"):
        await session.respond_to_elicit(hotel_id(), {"action": "maybe"})
    assert session.status == "awaiting_elicit"


async def test_answer_for_a_question_not_asked_is_refused(manager: SessionManager) -> None:
    session = await start(manager)
    await until_pause(session)
    with pytest.raises(ElicitNotPending) as info:
        await session.respond_to_elicit("plan_trip:confirm:call-1:2", Accept({"ok": True}))
    assert str(info.value) == (
        "Session 'call-1' has no pending elicitation plan_trip:confirm:call-1:2; the pending "
        "one is plan_trip:pick_hotel:call-1:1. Answers are accepted once, for the question "
        "currently asked."
    )
    await session.respond_to_elicit(hotel_id(), Accept({"hotel": "Harbour Inn"}))
    with pytest.raises(ElicitNotPending):  # a duplicate post-back of the same answer
        await session.respond_to_elicit(hotel_id(), Accept({"hotel": "Harbour Inn"}))


async def test_abort_while_awaiting_an_answer(manager: SessionManager) -> None:
    seen: list[str] = []

    async def body(params: Any, ctx: Any) -> str:
        try:
            await ctx.elicit("pick_hotel", message="Which?")
        except Exception as exc:
            seen.append(f"{type(exc).__name__}: {exc}")
            raise
        return "unreachable"

    tool = create_mcp_tool("probe").elicits(pick_hotel=PickHotel).execute(body)
    session = await manager.create(tool, {}, call_id="c-abort")
    await until_pause(session)
    assert [i.id for i in manager.list_active()] == ["c-abort"]
    await manager.abort("c-abort", "user pressed Abort")
    assert seen == ["SessionAborted: Session 'c-abort' was aborted: user pressed Abort"]
    assert await until_pause(session) == [("aborted", "user pressed Abort")]
    assert session.status == "aborted"
    assert manager.get("c-abort") is None and manager.list_active() == []
    await session.abort("again")  # idempotent
    with pytest.raises(SessionNotFound):
        await manager.abort("c-abort", "again")


async def test_abort_while_running_raises_session_aborted_at_the_await(
    manager: SessionManager,
) -> None:
    seen: list[str] = []
    started = asyncio.Event()

    async def slow(_: None) -> None:
        started.set()
        await asyncio.sleep(30)

    async def body(params: Any, ctx: Any) -> str:
        try:
            await ctx.step("slow", slow, None)
        except Exception as exc:
            seen.append(type(exc).__name__)
            raise
        return "unreachable"

    tool = create_mcp_tool("probe").elicits().execute(body)
    session = await manager.create(tool, {}, call_id="c-run")
    await started.wait()
    assert session.status == "running"
    await session.abort("operator stop")
    assert seen == ["SessionAborted"]
    assert await until_pause(session) == [("aborted", "operator stop")]


async def test_a_tool_that_swallows_abort_still_ends_aborted(manager: SessionManager) -> None:
    async def body(params: Any, ctx: Any) -> str:
        try:
            await ctx.elicit("pick_hotel", message="Which?")
        except Exception:
            return "pretend nothing happened"
        return "unreachable"

    tool = create_mcp_tool("probe").elicits(pick_hotel=PickHotel).execute(body)
    session = await manager.create(tool, {}, call_id="c-swallow")
    await until_pause(session)
    await session.abort("stop")
    assert await until_pause(session) == [("aborted", "stop")]


async def test_tool_exception_fails_the_session(manager: SessionManager) -> None:
    async def body(params: Any, ctx: Any) -> str:
        await ctx.log("warning", "about to break")
        raise RuntimeError("payment service down")

    tool = create_mcp_tool("probe").elicits().execute(body)
    session = await manager.create(tool, {}, call_id="c-fail")
    assert await until_pause(session) == [
        ("log", "warning", "about to break", {}),
        ("failed", "RuntimeError: payment service down"),
    ]
    assert session.status == "failed"
    assert manager.get("c-fail") is None
    # Reading past the end keeps returning the terminal event instead of hanging.
    assert (await session.next_event()).type == "failed"


async def test_result_that_is_not_json_fails_with_a_clear_error(manager: SessionManager) -> None:
    async def body(params: Any, ctx: Any) -> object:
        return object()

    tool = create_mcp_tool("probe").elicits().execute(body)
    session = await manager.create(tool, {}, call_id="c-obj")
    [(kind, error)] = await until_pause(session)
    assert kind == "failed"
    assert error.startswith(
        "NotSerializable: The result of tool 'probe' must be JSON-serialisable, got object"
    )


async def test_parameters_are_validated_before_the_tool_runs(manager: SessionManager) -> None:
    before = len(bookings_made)
    with pytest.raises(InvalidToolParams) as info:
        await manager.create(trip_tool, {"city": "", "nights": 99}, call_id="c-bad")
    assert str(info.value) == (
        "Invalid arguments for tool 'plan_trip': city: String should have at least 1 character; "
        "nights: Input should be less than or equal to 30. "
        "Call it again with arguments matching its parameters schema."
    )
    assert manager.get("c-bad") is None and len(bookings_made) == before
    with pytest.raises(InvalidToolParams, match="expected an object, got list"):
        await manager.create(trip_tool, [1, 2], call_id="c-bad")  # type: ignore[arg-type]


async def test_one_session_per_call_id(manager: SessionManager) -> None:
    await start(manager, "dup")
    with pytest.raises(DuplicateSession, match="'dup' is already running"):
        await start(manager, "dup")
    with pytest.raises(ValueError, match="call_id must be a non-empty string"):
        await start(manager, " ")


async def test_list_active_shows_status_and_pending_question(manager: SessionManager) -> None:
    first = await start(manager, "a")
    await until_pause(first)
    second = await start(manager, "b")
    await until_pause(second)
    await second.respond_to_elicit(hotel_id("b"), Accept({"hotel": "Harbour Inn"}))
    await until_pause(second)
    infos = {i.id: i for i in manager.list_active()}
    assert (infos["a"].status, infos["a"].pending_key, infos["a"].pending_message) == (
        "awaiting_elicit",
        "pick_hotel",
        HOTEL_Q,
    )
    assert (infos["b"].pending_key, infos["b"].pending_elicit_id) == (
        "confirm",
        "plan_trip:confirm:b:2",
    )
    assert infos["a"].created_at <= infos["b"].created_at
    assert manager.get("a") is first and manager.get("zzz") is None


async def test_status_is_awaiting_sample_during_a_completion() -> None:
    release = asyncio.Event()
    statuses: list[str] = []

    class SlowSampler:
        async def __call__(self, request: Any) -> Any:
            from chatbridge import SampleResult

            await release.wait()
            return SampleResult("done", "slow/1", {})

    async def body(params: Any, ctx: Any) -> str:
        return (await ctx.sample("hello")).text

    mgr = SessionManager(sampler=SlowSampler())
    tool = create_mcp_tool("probe").elicits().execute(body)
    session = await mgr.create(tool, {}, call_id="s")
    await asyncio.sleep(0.01)
    statuses.append(session.status)
    release.set()
    assert await until_pause(session) == [("completed", "done")]
    assert statuses == ["awaiting_sample"]


async def test_unanswered_questions_expire_as_cancel_after_the_timeout() -> None:
    now = [1000.0]
    mgr = SessionManager(idle_timeout=60, clock=lambda: now[0])
    session = await mgr.create(trip_tool, {"city": "Oslo", "nights": 1}, call_id="idle")
    await until_pause(session)
    now[0] += 59
    assert await mgr.reap_idle() == []
    assert mgr.list_active()[0].idle_seconds == 59
    now[0] += 2
    assert await mgr.reap_idle() == ["idle"]
    # The tool sees Cancel for the hotel question and finishes on its own terms.
    assert await until_pause(session) == [("completed", {"booked": False, "reason": "cancel"})]
    [entry] = session.journal
    assert {k: entry[k] for k in ("seq", "kind", "key", "result", "scope", "pos")} == {
        "seq": 1,
        "kind": "elicit",
        "key": "pick_hotel",
        "result": {"action": "cancel"},
        "scope": "",
        "pos": 1,
    }
    assert mgr.get("idle") is None
    await mgr.shutdown()


async def test_the_reaper_runs_by_itself() -> None:
    mgr = SessionManager(idle_timeout=0.2)
    session = await mgr.create(trip_tool, {"city": "Oslo", "nights": 1}, call_id="idle")
    await until_pause(session)
    assert await until_pause(session, timeout=5) == [
        ("completed", {"booked": False, "reason": "cancel"})
    ]
    await mgr.shutdown()


async def test_unknown_session_errors(manager: SessionManager) -> None:
    with pytest.raises(SessionNotFound) as info:
        manager.require("gone")
    assert str(info.value) == (
        "No plugin session 'gone': it finished, was aborted, or was lost (for example in a "
        "restart). Retry the operation."
    )


async def test_cancel_result_objects_compare_by_value() -> None:
    assert Cancel() == Cancel() and Decline() != Cancel()  # type: ignore[comparison-overlap]
    assert Accept({"a": 1}).accepted and not Decline().accepted and Cancel().content is None


class FlakyStore:
    """A ``JournalStore`` that refuses writes, or says another worker took the call."""

    def __init__(self, *, write_error: Exception | None = None, lost: bool = False) -> None:
        self.write_error, self.lost = write_error, lost
        self.appended: list[str] = []

    async def append(self, session: Any, entry: JournalEntry) -> None:
        if self.write_error is not None:
            raise self.write_error
        self.appended.append(entry.key)

    async def start_step(self, session: Any, entry: Any, request: Any) -> None:
        if self.lost:
            raise ClaimLost(session.id, "this-host:1", "other-host:2")

    async def fork(self, session: Any, seq: int) -> None:
        if self.write_error is not None:
            raise self.write_error


async def test_a_failed_journal_write_ends_the_session_even_if_the_tool_swallows_it() -> None:
    effects: list[str] = []

    async def body(params: Any, ctx: Any) -> str:
        with contextlib.suppress(Exception):  # a careless tool: it must still never go on
            await ctx.elicit("pick_hotel", message="Which?")
        effects.append("tried")
        await ctx.step("book", effects.append, "booked")
        return "done"

    store = FlakyStore(write_error=OSError("disk full"))
    mgr = SessionManager(sampler=LiteLLMSampler("offline/test"), journal_store=store)
    try:
        tool = create_mcp_tool("careless").elicits(pick_hotel=PickHotel).execute(body)
        session = await mgr.create(tool, {}, call_id="c1")
        [(kind, elicit_id, _)] = await until_pause(session)
        await session.respond_to_elicit(elicit_id, Accept({"hotel": "Harbour Inn"}))
        assert await until_pause(session) == [
            (
                "failed",
                "JournalWriteFailed: The answer could not be recorded (OSError: disk full); the "
                "call was stopped so it never acts on an answer that is not on record.",
            )
        ]
        assert effects == ["tried"]  # the step's side effect never ran
        assert session.journal == []  # nothing unrecorded is kept either
    finally:
        await mgr.shutdown()


async def test_a_step_does_not_run_once_another_worker_holds_the_call() -> None:
    effects: list[str] = []

    async def body(params: Any, ctx: Any) -> None:
        await ctx.step("charge", effects.append, "charged")

    store = FlakyStore(lost=True)
    mgr = SessionManager(sampler=LiteLLMSampler("offline/test"), journal_store=store)
    try:
        tool = create_mcp_tool("charge").elicits().execute(body)
        session = await mgr.create(tool, {}, call_id="c2")
        assert await until_pause(session) == [
            (
                "failed",
                "ClaimLost: Another worker took this call over (other-host:2 holds call 'c2', "
                "not this-host:1); this copy stopped so that only the holder acts on the call.",
            )
        ]
        assert effects == [] and store.appended == []
    finally:
        await mgr.shutdown()


async def test_a_manager_without_a_store_keeps_the_journal_in_memory() -> None:
    mgr = SessionManager()
    assert isinstance(mgr.journal_store, MemoryJournalStore)
    await mgr.shutdown()


class BrokenRecorder:
    """An observer whose every method fails after noting what it was told."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def __getattr__(self, name: str) -> Any:
        async def fail(*args: Any) -> None:
            self.told.append(name)
            raise RuntimeError(f"recorder down in {name}")

        return fail


async def test_a_failing_observer_is_logged_and_never_breaks_the_tool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = BrokenRecorder()
    mgr = SessionManager(observer=recorder)
    try:
        session = await start(mgr)
        assert [e[0] for e in await until_pause(session)] == ["log", "progress", "elicit"]
        with pytest.raises(ElicitValidationError):
            await session.respond_to_elicit(hotel_id(), Accept({"hotel": 42}))
        await session.respond_to_elicit(hotel_id(), Accept({"hotel": "Harbour Inn"}))
        assert await until_pause(session) == [("elicit", "plan_trip:confirm:call-1:2", CONFIRM_Q)]
        await session.abort("enough")
        assert (await session.next_event()).type == "aborted"
    finally:
        await mgr.shutdown()
    assert recorder.told[0] == "session_started"
    assert recorder.told[-1] == "session_ended"
    assert {
        "status_changed",
        "capability_requested",
        "capability_recorded",
        "answer_rejected",
        "log_emitted",
        "progress_emitted",
    } <= set(recorder.told)
    failures = [r for r in caplog.records if r.name == "chatbridge.observer"]
    assert len(failures) == len(recorder.told)
    assert failures[0].getMessage() == "session observer BrokenRecorder failed"
    assert "recorder down in session_started" in (failures[0].exc_text or "")
