"""One seat answer, traced: the chatbridge modules that run from the browser's frame to the
tool's ``ctx.elicit`` returning (issue 26: "one call path", aim at most 12 files).

The test books a flight on a browser-mode socket (HTML fragments, as the chat page) up to the
seat picker and waits until nothing is left to write. Then a profile hook records every Python
function called in the ``chatbridge`` package on the answer's way, from the moment the test
sends the seat frame (what htmx's ``ws-send`` sends for a click on a free seat) until the tool's
``ctx.elicit`` for the seat returns its answer; the hook itself stops there. The answer's way
is every task of the event loop but those that run on a clock or a queue of their own
(``BACKGROUND``: the socket's outbox, which shows the answer's events to the user but is not on
the way to the tool, and the runtime's sweepers), plus what the database writer runs on its
thread (the journal entry, the call's status, the conversation's phase: the answer's writes all
go through the writer). Whatever runs on that way counts: the socket receiving the frame, the
hub, the form's check, the session, the journal write, the lease's fence. A coroutine resumed
counts as called (its code runs again), so the ASGI wrappers a frame passes through count too.

When the path changes on purpose, print the new set, paste it over ``EXPECTED_PATH`` and
check ``MUST_RUN`` still names functions that exist::

    CHATBRIDGE_PRINT_PATH=1 .venv/bin/pytest tests/test_call_path.py -s

It prints ``EXPECTED_PATH``, then every function with the tasks or threads it ran in
("(resumed)": a coroutine only resumed there, not called), then what ran off the way.
``bench/structure.py`` reads ``EXPECTED_PATH`` from this file for its "files per seat answer".
"""

from __future__ import annotations

import asyncio
import dis
import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

import chatbridge
from chatbridge import Accept
from chatbridge.calls.context import CallContext
from chatbridge.records.writer import flush
from plugins.book_flight.data import seat_map_for
from tests.chat_client import html_socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]

# The chatbridge source files one seat answer runs, sorted (paths from the project root).
EXPECTED_PATH = (
    "chatbridge/author/elicit.py",
    "chatbridge/author/plugins.py",
    "chatbridge/author/storable.py",
    "chatbridge/calls/commitment.py",
    "chatbridge/calls/context.py",
    "chatbridge/calls/drive.py",
    "chatbridge/calls/events.py",
    "chatbridge/calls/journal.py",
    "chatbridge/calls/questions.py",
    "chatbridge/calls/sessions.py",
    "chatbridge/chat/consumers.py",
    "chatbridge/chat/limits.py",
    "chatbridge/cluster/broadcast.py",
    "chatbridge/engine/conversation.py",
    "chatbridge/engine/engine.py",
    "chatbridge/engine/protocol.py",
    "chatbridge/engine/tool_calls.py",
    "chatbridge/records/lean_sql.py",
    "chatbridge/records/lease.py",
    "chatbridge/records/recorder.py",
    "chatbridge/records/store.py",
    "chatbridge/records/writer.py",
)

# Functions the path must run, as "file:qualified name", so the test cannot pass on a recording
# that missed the answer: the socket's receive, the session taking the answer, and the database
# thread (the writer's group, where the answer's journal entry is written).
MUST_RUN = (
    "chatbridge/chat/consumers.py:ChatConsumer.receive",
    "chatbridge/calls/questions.py:SessionQuestions.respond_to_elicit",
    "chatbridge/records/writer.py:run_group",
)

# Tasks that run on a clock or a queue of their own, not on the answer's way (by name prefix):
# the socket's outbox (rendering events for the user) and the runtime's background loops.
BACKGROUND = (
    "chatbridge-socket-outbox",
    "chatbridge-takeover",
    "chatbridge-retention",
    "chatbridge-idle-reaper",
    "chatbridge-lease:",
    "chatbridge-parked-calls",
    "chatbridge-mcp-revocations",
    "chatbridge-worker-",
)
# On a thread, what the database writer runs (every write of the answer goes through it).
WRITER = ("records/writer.py", "run_group")

PACKAGE = Path(chatbridge.__file__).resolve().parent
ROOT = PACKAGE.parent
RESUME = dis.opmap["RESUME"]  # a frame's first instruction; its argument 0: called, not resumed


class CallPath:
    """A profile hook: the chatbridge functions called until ``until`` returns an answer."""

    def __init__(self, until: CodeType, loop: asyncio.AbstractEventLoop) -> None:
        self.until, self.loop = until, loop
        self.recording = True
        self.ended = asyncio.Event()
        # "file:qualname" -> where it ran (a task's name, or a thread's other than the loop's)
        self.functions: dict[str, set[str]] = {}
        self.elsewhere: dict[str, set[str]] = {}  # the same, for what ran off the answer's way
        self.entered: set[str] = set()  # functions started afresh, not only resumed
        self._loop_thread = threading.get_ident()
        self._files: dict[str, str | None] = {}  # co_filename -> path from ROOT, or None

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(sorted({name.partition(":")[0] for name in self.functions}))

    def _ours(self, filename: str) -> str | None:
        if filename not in self._files:
            path = Path(filename).resolve()
            inside = path.is_relative_to(PACKAGE)
            self._files[filename] = path.relative_to(ROOT).as_posix() if inside else None
        return self._files[filename]

    def _where(self, frame: FrameType) -> tuple[str, bool]:
        """Where ``frame`` runs, and whether that is on the answer's way."""
        if threading.get_ident() != self._loop_thread:
            return f"thread {threading.current_thread().name}", self._under_writer(frame)
        task = asyncio.current_task(self.loop)
        if task is None:
            return "loop callback", True
        return f"task {task.get_name()}", not task.get_name().startswith(BACKGROUND)

    def _under_writer(self, frame: FrameType | None) -> bool:
        while frame is not None:
            code = frame.f_code
            if code.co_name == WRITER[1] and code.co_filename.endswith(WRITER[0]):
                return True
            frame = frame.f_back
        return False

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.recording:
            return
        code = frame.f_code
        if event == "call":
            if (file := self._ours(code.co_filename)) is not None:
                name = f"{file}:{code.co_qualname}"
                where, on_the_way = self._where(frame)
                if not on_the_way:
                    self.elsewhere.setdefault(name, set()).add(where)
                    return
                self.functions.setdefault(name, set()).add(where)
                at = frame.f_lasti
                if at >= 0 and code.co_code[at] == RESUME and code.co_code[at + 1] == 0:
                    self.entered.add(name)
        # A coroutine's frame "returns" at every suspension too (with what it awaits): the
        # elicit is over when its frame returns the answer itself.
        elif event == "return" and code is self.until and isinstance(arg, Accept):
            self.recording = False
            self.loop.call_soon_threadsafe(self.ended.set)

    def report(self) -> str:
        """The files, then each function with where it ran ("resumed": only resumed)."""
        lines = ["EXPECTED_PATH = (", *(f'    "{file}",' for file in self.files), ")", ""]
        for name, where in sorted(self.functions.items()):
            resumed = "" if name in self.entered else "  (resumed)"
            lines.append(f"{name}  [{', '.join(sorted(where))}]{resumed}")
        lines += ["", "off the answer's way:"]
        lines += [f"{n}  [{', '.join(sorted(w))}]" for n, w in sorted(self.elsewhere.items())]
        return "\n".join(lines)


@contextmanager
def _profiled(hook: Any) -> Iterator[None]:
    """``hook`` on this thread and on threads started from now on (while in the block)."""
    before, before_threads = sys.getprofile(), threading.getprofile()
    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(before)
        threading.setprofile(before_threads)


def _ids(fragment: str) -> dict[str, str]:
    return dict(re.findall(r'name="(session_id|call_id|elicit_id)" value="([^"]+)"', fragment))


async def _form_with(socket: Any, marker: str) -> str:
    """The next fragment holding ``marker`` (an elicitation card's field)."""
    while True:
        fragment = await socket.receive_from(timeout=10)
        if marker in fragment:
            return fragment


def _frame(page: str, form: str, **fields: str) -> str:
    """What htmx's ``ws-send`` sends for a click on a submit button of an elicitation card:
    the card's hidden fields, the button's name and value, and htmx's headers (the form has
    no id, name or target)."""
    headers = {
        "HX-Request": "true",
        "HX-Trigger": None,
        "HX-Trigger-Name": None,
        "HX-Target": None,
        "HX-Current-URL": page,
    }
    body = {"command": "elicit_response", **_ids(form), **fields, "HEADERS": headers}
    return json.dumps(body)


async def test_one_seat_answer_runs_the_expected_modules() -> None:
    socket = await html_socket()
    try:
        conversation = socket.scope["path"].split("/")[3]
        page = "http://127.0.0.1" + reverse("chatbridge:conversation", args=[conversation])
        await socket.send_to(
            text_data=json.dumps(
                {
                    "command": "user_message",
                    "text": "Book a flight from JFK to LAX",
                    "HEADERS": {"HX-Request": "true"},
                }
            )
        )
        flights = await _form_with(socket, 'name="flight_id"')
        flight_id = re.findall(r'name="flight_id" value="([^"]+)"', flights)[0]
        await socket.send_to(text_data=_frame(page, flights, flight_id=flight_id))
        seats = await _form_with(socket, 'name="seat_label"')
        seat = seat_map_for(flight_id).first_free()
        assert seat is not None and f'name="seat_label" value="{seat}"' in seats
        await flush()  # nothing of the flight's answer is left to write when recording starts

        # ``ctx.elicit`` hands back ``_ask``'s coroutine: that is what returns the answer.
        path = CallPath(CallContext._ask.__code__, asyncio.get_running_loop())
        await sync_to_async(sys.setprofile)(path.hook)  # the database thread (SQLite's writes)
        try:
            with _profiled(path.hook):
                await socket.send_to(text_data=_frame(page, seats, seat_label=seat))
                await asyncio.wait_for(path.ended.wait(), timeout=10)
        finally:
            await sync_to_async(sys.setprofile)(None)
    finally:
        await socket.disconnect()

    assert_path(path, "one seat answer", EXPECTED_PATH, MUST_RUN, "tests/test_call_path.py")


def assert_path(
    path: CallPath, what: str, expected: tuple[str, ...], must_run: tuple[str, ...], test: str
) -> None:
    """``path`` ran the functions ``must_run`` (the recording saw the answer) and exactly the
    files ``expected``; printed in full with ``CHATBRIDGE_PRINT_PATH`` set."""
    if os.environ.get("CHATBRIDGE_PRINT_PATH"):
        print(f"\n{what}: {len(path.files)} files\n{path.report()}")
    missing = [name for name in must_run if name not in path.functions]
    assert not missing, f"the recording missed {missing}: it did not see the answer's path"
    added = sorted(set(path.files) - set(expected))
    gone = sorted(set(expected) - set(path.files))
    assert path.files == expected, (
        f"{what} ran {len(path.files)} chatbridge files, EXPECTED_PATH has {len(expected)}; "
        f"new: {added}, no longer run: {gone}. The files it ran:\n"
        + "\n".join(path.files)
        + f"\n(CHATBRIDGE_PRINT_PATH=1 pytest {test} -s prints what ran where)"
    )


def test_the_readme_lists_the_path_this_test_asserts() -> None:
    """docs/layout.md names the files of one seat answer: the same set as ``EXPECTED_PATH``."""
    text = (ROOT / "docs" / "layout.md").read_text()
    start = text.index("One seat answer from the browser")
    end = text.index("files. Issue 26", start)
    listed = {f"chatbridge/{name}" for name in re.findall(r"`([a-z_/]+\.py)`", text[start:end])}
    listed.discard("chatbridge/tests/test_call_path.py")
    assert sorted(listed) == sorted(EXPECTED_PATH)
    assert f"{len(EXPECTED_PATH)} files" in text[start : end + 6]
