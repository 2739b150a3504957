"""Journal and replay: a tool resumes from its recorded capability results."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chatbridge import Accept, SessionManager, create_mcp_tool
from chatbridge.calls.journal import Journal, JournalEntry
from tests.support import PickHotel, bookings_made, trip_tool, until_pause

PARAMS = {"city": "Porto", "nights": 3}


async def answer_two_questions(manager: SessionManager) -> list[dict[str, Any]]:
    session = await manager.create(trip_tool, PARAMS, call_id="trip")
    await until_pause(session)
    await session.respond_to_elicit("plan_trip:pick_hotel:trip:1", Accept({"hotel": "Harbour Inn"}))
    await until_pause(session)
    await session.respond_to_elicit("plan_trip:confirm:trip:2", Accept({"ok": True}))
    events = await until_pause(session)
    assert events[-1][:2] == ("elicit", "plan_trip:rate:trip:3")
    return session.journal


async def test_replay_is_silent_until_the_third_question(manager: SessionManager) -> None:
    journal = await answer_two_questions(manager)
    booked = len(bookings_made)
    stored = json.loads(json.dumps(journal))  # as it would come back from a database
    assert [e["kind"] for e in stored] == ["elicit", "sample", "elicit", "step"]

    fresh = SessionManager(sampler=manager.sampler)
    try:
        session = await fresh.create(trip_tool, PARAMS, call_id="trip", journal=stored)
        # No log, no progress, no first or second question: straight to the third one.
        assert await until_pause(session) == [
            ("elicit", "plan_trip:rate:trip:3", "How was the booking experience?")
        ]
        assert len(bookings_made) == booked  # the step did not run again
        assert session.journal == stored

        await session.respond_to_elicit("plan_trip:rate:trip:3", Accept({"stars": 4}))
        events = await until_pause(session)
        assert events[0] == ("progress", "Done", 3, 3)
        result = events[-1][1]
        assert result["booking"] == stored[3]["result"]["value"]["booking"]
        assert result["tip"] == stored[1]["result"]["text"]
        assert result["stars"] == 4
    finally:
        await fresh.shutdown()


async def test_replay_of_a_complete_journal_finishes_without_events(
    manager: SessionManager,
) -> None:
    journal = await answer_two_questions(manager)
    rate = {"seq": 5, "kind": "elicit", "key": "rate", "result": {"action": "decline"}}
    journal.append({**rate, "scope": "", "pos": 5})  # no digest: not checked
    fresh = SessionManager(sampler=manager.sampler)
    session = await fresh.create(trip_tool, PARAMS, call_id="again", journal=journal)
    # Only what follows the last record is live: the final progress note and the result.
    progress, (kind, result) = await until_pause(session)
    assert progress == ("progress", "Done", 3, 3)
    assert (kind, result["stars"], result["booked"]) == ("completed", None, True)
    await fresh.shutdown()


async def test_divergence_raises_replay_divergence(manager: SessionManager) -> None:
    journal = [{"seq": 1, "kind": "sample", "key": "sample", "result": {"text": "x", "model": "m"}}]
    session = await manager.create(trip_tool, PARAMS, call_id="div", journal=journal)
    [(kind, error)] = await until_pause(session)
    assert kind == "failed"
    assert error == (
        "ReplayDivergence: Replay of tool 'plan_trip' diverged at position 1 of the tool body: "
        "the journal recorded sample 'sample', the tool now called elicit 'pick_hotel'. Apart "
        "from ctx calls and ctx.step, a tool must be deterministic; wrap other side effects in "
        "ctx.step()."
    )


async def test_step_returns_the_same_json_value_live_and_on_replay(manager: SessionManager) -> None:
    seen: list[Any] = []

    def effect() -> tuple[int, str]:
        return (1, "a")

    async def body(params: Any, ctx: Any) -> None:
        seen.append(await ctx.step("effect", effect))
        await ctx.elicit("pick_hotel", message="Which?")

    tool = create_mcp_tool("probe").elicits(pick_hotel=PickHotel).execute(body)
    live = await manager.create(tool, {}, call_id="s1")
    await until_pause(live)
    replayed = await manager.create(tool, {}, call_id="s2", journal=live.journal)
    await until_pause(replayed)
    assert seen == [[1, "a"], [1, "a"]]


async def test_step_with_an_unserialisable_result_fails_clearly(manager: SessionManager) -> None:
    async def body(params: Any, ctx: Any) -> None:
        await ctx.step("bad", object)

    tool = create_mcp_tool("probe").elicits().execute(body)
    session = await manager.create(tool, {}, call_id="bad")
    [(kind, error)] = await until_pause(session)
    assert kind == "failed"
    assert error.startswith("NotSerializable: The result of step 'bad' must be JSON-serialisable")


async def test_async_steps_run_once_and_record(manager: SessionManager) -> None:
    runs: list[int] = []

    async def charge(amount: int) -> dict[str, int]:
        runs.append(amount)
        return {"charged": amount}

    async def body(params: Any, ctx: Any) -> Any:
        return await ctx.step("charge", charge, 25)

    tool = create_mcp_tool("probe").elicits().execute(body)
    first = await manager.create(tool, {}, call_id="a1")
    assert await until_pause(first) == [("completed", {"charged": 25})]
    again = await manager.create(tool, {}, call_id="a2", journal=first.journal)
    assert await until_pause(again) == [("completed", {"charged": 25})]
    assert runs == [25]


def test_malformed_journal_entries_are_refused() -> None:
    with pytest.raises(ValueError, match="seq must be a positive integer, got 0"):
        Journal("t", [{"seq": 0, "kind": "step", "key": "k", "result": {}}])
    with pytest.raises(ValueError, match="kind must be one of"):
        Journal("t", [{"seq": 1, "kind": "wat", "key": "k", "result": {}}])
    with pytest.raises(ValueError, match="two entries with seq 1"):
        Journal("t", [JournalEntry(1, "step", "k", {}), JournalEntry(1, "step", "k", {})])


def test_entries_round_trip_through_json() -> None:
    entry = JournalEntry(3, "elicit", "pick", {"action": "accept", "content": {"x": "é"}})
    assert JournalEntry.from_dict(json.loads(json.dumps(entry.to_dict()))) == entry


async def test_a_journal_stored_before_scopes_still_replays(manager: SessionManager) -> None:
    journal = await answer_two_questions(manager)
    old = [{k: e[k] for k in ("seq", "kind", "key", "result")} for e in journal]
    booked = len(bookings_made)
    fresh = SessionManager(sampler=manager.sampler)
    try:
        session = await fresh.create(trip_tool, PARAMS, call_id="old", journal=old)
        assert await until_pause(session) == [
            ("elicit", "plan_trip:rate:old:3", "How was the booking experience?")
        ]
        assert len(bookings_made) == booked
        # Read as the tool body's entries in seq order; no digest to check.
        assert [(e["scope"], e["pos"], e["digest"]) for e in session.journal] == [
            ("", 1, None),
            ("", 2, None),
            ("", 3, None),
            ("", 4, None),
        ]
    finally:
        await fresh.shutdown()


def test_two_entries_in_one_slot_are_refused() -> None:
    entries = [
        JournalEntry(1, "step", "k", {}, "2", 1, None),
        JournalEntry(2, "step", "k", {}, "2", 1, None),
    ]
    with pytest.raises(ValueError, match="two entries at position 1 of scope '2'"):
        Journal("t", entries)
