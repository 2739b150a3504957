"""One seat answer from a legacy MCP client, traced: the chatbridge modules that run from the
client's reply to the seat's ``elicitation/create`` to the tool's ``ctx.elicit`` returning
(the MCP twin of ``tests/test_call_path.py``, which traces the browser's seat frame).

The project's ASGI app is served by uvicorn in the test's own event loop (``tests.mcp_site``:
its lifespan starts the runtime; no server process), and the official MCP client connects to
it over loopback HTTP in legacy mode (2025-11-25: an ``initialize``d, stateful streamable-HTTP
session, whose server pushes each question as an ``elicitation/create`` request on the
``tools/call`` stream). It calls ``book_flight`` with a route and answers the flight question.
When the seat question comes, the elicitation callback waits until nothing is left to write,
installs the profile hook of ``tests.test_call_path`` (``CallPath``) and returns the seat
answer: the recording starts there, when the callback returns, before the SDK's client turns
the answer into its JSON-RPC response and POSTs it. It ends when the tool's ``ctx.elicit`` for
the seat returns its ``Accept`` (``CallContext._ask``'s frame returning it). The review question
that follows is declined: the call ends there, with no payment page.

Client and server share one thread and one loop, so the client's own code runs under the hook
too; only the ``chatbridge`` package is counted (``plugins`` apart, as in the chat's test), and
the client is the SDK's. What counts is what the chat's test counts (``CallPath``, reused): every
task of the loop but those on a clock or a queue of their own (``BACKGROUND``), plus what the
database writer runs on its thread. On this way: uvicorn's task for the POST of the response
(``serving``'s router, the runtime's lifespan wrapper, ``/mcp``'s guard: origin, caller,
revocation, relay to the session's holder, replay, session cap; the SDK's transport then hands
the response to its session, which resolves the pushed request: SDK code only); the carrier's
task that was waiting on that request (``PushCarrier`` reading the answer back from the wire);
the SDK's task serving the ``tools/call`` request (``_put`` delivering the answer to the
session, which checks it against the question); the two tasks ``_put`` and the carrier cancel
once answered (the question's close waiter, the heartbeat); the session's own task (the tool,
the journal entry) and the database writer (its task, and its group on the database thread).

Nothing here waits on a clock: the recording starts from the callback and ends at the hook's
own signal. The carrier pings the client every 5 s while a question is open; the seat answer
leaves about a millisecond after the question arrives and the recording lasts some tens of
milliseconds, so no ping falls in it.

When the path changes on purpose, print the new set and paste it over ``EXPECTED_PATH``::

    CHATBRIDGE_PRINT_PATH=1 .venv/bin/pytest tests/test_mcp_call_path.py -s

It prints ``EXPECTED_PATH``, then every function with the tasks or threads it ran in, then what
ran off the way (see ``tests/test_call_path.py``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import ExitStack
from typing import Any

import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from mcp import Client
from pytest_django.fixtures import Settings

from chatbridge.author.model_context import extract_context
from chatbridge.calls.context import CallContext
from chatbridge.records.writer import flush
from tests.mcp_site import mcp_site
from tests.test_call_path import CallPath, _profiled, assert_path
from tests.test_mcp import ROUTE, free_seat

pytestmark = [pytest.mark.django_db(transaction=True)]

# The chatbridge source files one seat answer from a legacy MCP client runs, sorted.
EXPECTED_PATH = (
    "chatbridge/author/elicit.py",
    "chatbridge/author/storable.py",
    "chatbridge/calls/commitment.py",
    "chatbridge/calls/context.py",
    "chatbridge/calls/drive.py",
    "chatbridge/calls/events.py",
    "chatbridge/calls/journal.py",
    "chatbridge/calls/questions.py",
    "chatbridge/calls/sessions.py",
    "chatbridge/conf.py",
    "chatbridge/forwarded.py",
    "chatbridge/mcp/asgi.py",
    "chatbridge/mcp/callers.py",
    "chatbridge/mcp/caps.py",
    "chatbridge/mcp/exits_wire.py",
    "chatbridge/mcp/held_calls.py",
    "chatbridge/mcp/hosts.py",
    "chatbridge/mcp/relay_wire.py",
    "chatbridge/mcp/replay.py",
    "chatbridge/mcp/revocation.py",
    "chatbridge/mcp/schemas.py",
    "chatbridge/mcp/server.py",
    "chatbridge/mcp/session_relay.py",
    "chatbridge/mcp/tasks.py",
    "chatbridge/records/lean_sql.py",
    "chatbridge/records/lease.py",
    "chatbridge/records/recorder.py",
    "chatbridge/records/writer.py",
    "chatbridge/runtime.py",
    "chatbridge/serving.py",
)

# Functions the path must run, so that the test cannot pass on a recording that missed the
# answer: ``/mcp`` receiving the POST of the client's response, the carrier that pushed the
# question reading it, the session taking the answer, and the database thread (the writer's
# group, where the answer's journal entry is written).
MUST_RUN = (
    "chatbridge/mcp/asgi.py:McpEndpoint.__call__",
    "chatbridge/mcp/hosts.py:PushCarrier.__call__",
    "chatbridge/mcp/hosts.py:deliver",
    "chatbridge/calls/sessions.py:PluginSession.respond_to_elicit",
    "chatbridge/records/writer.py:run_group",
)


class SeatAnswerer:
    """The elicitation callback: the first flight, then the first free seat with the
    recording started as it returns, then a declined review once the recording is over."""

    def __init__(self) -> None:
        self.path: CallPath | None = None
        self.questions: list[str] = []
        self._hooks = ExitStack()
        self._database_hooked = False

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        found = extract_context(params.requested_schema, params.message)
        if "flights" in found:
            self.questions.append("flight")
            return types.ElicitResult(
                action="accept", content={"flight_id": found["flights"][0]["id"]}
            )
        if "seat_map" in found:
            self.questions.append("seat")
            answer = types.ElicitResult(
                action="accept", content=free_seat(found["seat_map"]["flight_id"])
            )
            await flush()  # nothing of the flight's answer is left to write when recording starts
            # ``ctx.elicit`` hands back ``_ask``'s coroutine: that is what returns the answer.
            path = CallPath(CallContext._ask.__code__, asyncio.get_running_loop())
            path.recording = False  # on from the callback's return, below
            await sync_to_async(sys.setprofile)(path.hook)  # the database thread
            self._database_hooked = True
            self._hooks.enter_context(_profiled(path.hook))
            self.path = path
            path.recording = True
            return answer
        self.questions.append("review")
        assert self.path is not None, f"a question after {self.questions} that is no seat's"
        await asyncio.wait_for(self.path.ended.wait(), timeout=10)  # asked after it returned
        await self.unhook()
        return types.ElicitResult(action="decline")

    async def unhook(self) -> None:
        self._hooks.close()
        if self._database_hooked:
            self._database_hooked = False
            await sync_to_async(sys.setprofile)(None)


@pytest.fixture
async def in_process_site(settings: Settings) -> AsyncIterator[str]:
    """The app in this loop (uvicorn, its lifespan starting a runtime), /mcp open."""
    settings.CHATBRIDGE_MCP_PUBLIC = True
    channel_layers.backends.clear()  # a channel layer of this test's loop, as fresh_runtime's
    async with mcp_site() as url:
        yield url


async def test_one_seat_answer_over_legacy_mcp_runs_the_expected_modules(
    in_process_site: str,
) -> None:
    person = SeatAnswerer()
    try:
        async with Client(
            f"{in_process_site}/mcp", mode="legacy", elicitation_callback=person
        ) as client:
            result = await client.call_tool("book_flight", ROUTE)
    finally:
        await person.unhook()
    assert person.questions == ["flight", "seat", "review"]
    assert not result.is_error, result.content
    assert result.structured_content == {"booked": False, "reason": "booking not confirmed"}
    path = person.path
    assert path is not None, "the seat question never came"
    assert not path.recording, "the seat's ctx.elicit never returned an Accept under the hook"

    assert_path(
        path,
        "one seat answer over legacy MCP",
        EXPECTED_PATH,
        MUST_RUN,
        "tests/test_mcp_call_path.py",
    )
