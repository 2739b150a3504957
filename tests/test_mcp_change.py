"""Changing an earlier answer over MCP, with the official Python SDK's client: each elicitation
says in its ``_meta`` which earlier answers it offers to change (the SDK's client drops the
``_meta`` of a 2026-07-28 round's ``inputRequests``: checked on the legacy push); a client that
answers with
``_meta["io.chatbridge/change"]`` gets that question again, on the legacy push and on the
2026-07-28 rounds alike, and nothing done after it is done twice."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from chatbridge.mcp.exits_wire import CHANGE_META, EXITS_META
from tests.test_change_answer import issued, trip_tool
from tests.test_mcp_conformance import MODERN, bridge_of


class Traveller:
    """An MCP user who picks seat 4C, goes back from the review to take 7A, and tries to
    change the seat once more after the ticket was issued."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.exits: list[dict[str, Any]] = []
        self.changed = False

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        message = params.message.split("\n\n", 1)[0]
        self.messages.append(params.message)
        self.exits.append((params.meta or {}).get(EXITS_META, {}))
        if message == "Which flight?":
            return types.ElicitResult(action="accept", content={"code": "MR-276"})
        if message.startswith("Which seat"):
            seat = "7A" if self.changed else "4C"
            return types.ElicitResult(action="accept", content={"label": seat})
        if message == "Book MR-276, seat 4C?":
            self.changed = True
            return types.ElicitResult(action="cancel", _meta={CHANGE_META: "seat"})
        if message.startswith("Book MR-276, seat 7A?"):
            return types.ElicitResult(action="accept", content={"confirm": True})
        if params.message == "How was it?":  # too late to change the seat: ticket issued
            return types.ElicitResult(action="cancel", _meta={CHANGE_META: "seat"})
        return types.ElicitResult(action="accept", content={"stars": 5})


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_an_mcp_client_changes_the_seat_at_the_review(mode: str) -> None:
    traveller = Traveller()
    before = len(issued)
    async with Client(
        bridge_of(trip_tool).server, mode=mode, elicitation_callback=traveller
    ) as client:
        result = await client.call_tool("trip", {})
    assert not result.is_error, result
    assert result.structured_content is not None
    ticket = result.structured_content["ticket"]
    assert ticket.endswith("-MR-276-7A")
    assert issued[before:] == [ticket]  # one ticket, with the new seat
    assert result.structured_content["stars"] == 5

    heads = [m.split("\n\n", 1)[0] for m in traveller.messages]
    assert heads == [
        "Which flight?",
        "Which seat on MR-276?",
        "Book MR-276, seat 4C?",
        "Which seat on MR-276?",  # asked again
        "Book MR-276, seat 7A?",
        "How was it?",
        "How was it?",  # the change was refused: asked again, saying why
    ]
    assert "ticket was done after it" in traveller.messages[-1]
    if mode == MODERN:  # the SDK's client drops an inputRequests entry's _meta
        return
    review = traveller.exits[2]
    assert [(c["key"], c["label"]) for c in review["change"]] == [
        ("flight", "Change flight"),
        ("seat", "Change seat"),
    ]
    assert review["decline"] == {
        "label": "Don't book",
        "hint": "Ends the booking; nothing is charged.",
    }
    assert review["cancel"] is None
    assert traveller.exits[0]["change"] == []  # nothing answered before the first question
    assert traveller.exits[5]["change"] == []  # nothing before the ticket may change


async def test_a_client_that_cannot_elicit_changes_the_seat_through_respond() -> None:
    """A client without elicitation gets each question as a request notice (with its exits)
    and answers through _respond; a payload with _meta["io.chatbridge/change"] goes back."""
    notices: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.data.get("type") == "request":
            notices.put_nowait(params.data)

    async def respond(notice: dict[str, Any], payload: dict[str, Any]) -> None:
        args = {"request_id": notice["request_id"], "payload": payload}
        answered = await client.call_tool("_respond", args)
        assert answered.structured_content is not None, answered
        assert answered.structured_content["ok"] is True, answered

    before = len(issued)
    async with Client(
        bridge_of(trip_tool).server, mode="legacy", logging_callback=on_log
    ) as client:
        call = asyncio.create_task(client.call_tool("trip", {}))
        seen: list[str] = []
        while True:
            notice = await asyncio.wait_for(notices.get(), 10)
            seen.append(notice["request_type"])
            key = notice["request_type"]
            if key == "flight":
                await respond(notice, {"code": "MR-276"})
            elif key == "seat":
                await respond(notice, {"label": "7A" if "review" in seen else "4C"})
            elif key == "review" and seen.count("review") == 1:
                assert [c["key"] for c in notice["exits"]["change"]] == ["flight", "seat"]
                change = {"action": "cancel", "_meta": {CHANGE_META: "seat"}}
                await respond(notice, change)
            elif key == "review":
                assert "seat 7A" in notice["message"]
                await respond(notice, {"action": "accept", "content": {"confirm": True}})
            else:
                await respond(notice, {"stars": 4})
                break
        result = await call
    assert seen == ["flight", "seat", "review", "seat", "review", "rate"]
    assert result.structured_content is not None
    assert issued[before:] == [result.structured_content["ticket"]]
    assert result.structured_content["ticket"].endswith("-MR-276-7A")
