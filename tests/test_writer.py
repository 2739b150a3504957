"""The database writer: awaited writes first, background writes in groups that never starve,
one transaction per group, and a failing write reported alone."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import AsyncIterator

import pytest
from asgiref.sync import sync_to_async
from django.db import IntegrityError, connection, transaction

from chatbridge.records.models import Conversation
from chatbridge.records.writer import Writer, WriterNotRunning, undo_on_retry

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def writer() -> AsyncIterator[Writer]:
    started = Writer()
    await started.start()
    yield started
    await started.aclose()


def titled(title: str) -> None:
    Conversation.objects.create(owner="session:writer", title=title)


def fails() -> None:
    Conversation.objects.create(id=TAKEN, owner="session:writer", title="refused")


def taken() -> None:
    Conversation.objects.create(id=TAKEN, owner="session:writer", title="x")


def raises() -> None:
    raise ValueError("this write fails")


TAKEN = uuid.uuid4()


async def titles() -> list[str]:
    return [c.title async for c in Conversation.objects.order_by("created_at", "title")]


async def test_an_awaited_write_runs_before_background_writes_queued_earlier() -> None:
    """...which ride along in its group (one commit) instead of waiting for their linger."""
    # A background group gathers company for its linger; a long one here, so that however slow
    # the machine, the background write is not due yet when the awaited one is queued.
    writer = Writer(linger=60.0)
    await writer.start()
    try:
        ran: list[str] = []
        writer.later(ran.append, "background")
        await writer.now(ran.append, "awaited")
        assert ran == ["awaited", "background"]
    finally:
        await writer.aclose()


async def test_background_writes_are_not_starved_by_a_stream_of_awaited_writes(
    writer: Writer,
) -> None:
    ran: list[str] = []
    writer.later(ran.append, "background")
    awaited = 0
    while "background" not in ran:
        await writer.now(ran.append, "awaited")
        awaited += 1
        assert awaited < 10_000, "the background write never ran"
    assert ran[-1] in ("background", "awaited")


async def test_background_writes_queued_together_commit_together(writer: Writer) -> None:
    events: list[tuple[str, int]] = []

    def job(n: int) -> None:
        events.append(("ran", n))
        transaction.on_commit(lambda: events.append(("committed", n)))

    for n in range(20):
        writer.later(job, n)
    await writer.flush()
    assert events == [("ran", n) for n in range(20)] + [("committed", n) for n in range(20)]


async def test_ordered_writes_wait_for_the_next_awaited_write_and_commit_in_its_group() -> None:
    """``write_soon`` lingers (a long linger here: however slow the machine, it is not due yet)
    and the next ``now`` carries it, in order, ahead of background writes queued before it,
    in one commit; the ``now`` hands back what its function returned."""
    writer = Writer(linger=60.0)
    await writer.start()
    try:
        events: list[str] = []

        def job(name: str) -> str:
            events.append(name)
            transaction.on_commit(lambda: events.append(f"{name} committed"))
            return name.upper()

        writer.later(job, "background")
        first = writer.soon(job, "soon 1")
        second = writer.soon(job, "soon 2")
        # Not due for 60 s: only the ``now`` can take them, and they commit in its group.
        assert await writer.now(job, "now") == "NOW"
        assert events == [
            *("soon 1", "soon 2", "now", "background"),
            *("soon 1 committed", "soon 2 committed", "now committed", "background committed"),
        ]
        assert (first.result(), second.result()) == ("SOON 1", "SOON 2")
    finally:
        await writer.aclose()


async def test_an_ordered_write_goes_on_its_own_once_its_linger_is_over(
    writer: Writer, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing awaited follows: it is written anyway; a failure reaches its future and the log."""
    assert await writer.soon(titled, "alone") is None
    assert await titles() == ["alone"]
    failed = writer.soon(raises)
    with (
        caplog.at_level(logging.ERROR, logger="chatbridge.writer"),
        pytest.raises(ValueError, match="this write fails"),
    ):
        await failed
    assert "ordered write failed" in caplog.text


async def test_writes_run_off_the_event_loop_on_the_thread_the_database_wants(
    writer: Writer,
) -> None:
    names: list[str] = []
    await writer.now(lambda: names.append(threading.current_thread().name))
    assert names[0] != threading.current_thread().name
    if connection.vendor == "sqlite":  # one writer at a time: the process's one database thread
        shared = await sync_to_async(lambda: threading.current_thread().name)()
        assert names[0] == shared
    else:
        assert names[0].startswith("chatbridge-writer")


async def test_a_failing_background_write_is_logged_and_its_group_commits(
    writer: Writer, caplog: pytest.LogCaptureFixture
) -> None:
    await writer.now(taken)
    writer.later(titled, "first")
    writer.later(fails)  # a statement the database refuses (the id is taken)
    writer.later(raises)
    writer.later(titled, "second")
    with caplog.at_level(logging.ERROR, logger="chatbridge.writer"):
        await writer.flush()
    assert sorted(await titles()) == ["first", "second", "x"]
    assert "background write fails failed" in caplog.text
    assert "background write raises failed" in caplog.text
    assert "this write fails" in caplog.text


async def test_a_failing_awaited_write_raises_in_its_caller_alone(writer: Writer) -> None:
    writer.later(titled, "kept")
    other = asyncio.create_task(writer.now(titled, "also kept"))
    with pytest.raises(ValueError, match="this write fails"):
        await writer.now(raises)
    await writer.now(taken)
    with pytest.raises(IntegrityError):
        await writer.now(fails)
    await other
    await writer.flush()
    assert sorted(await titles()) == ["also kept", "kept", "x"]


async def test_a_group_whose_awaited_write_fails_runs_again_taking_from_memory_again(
    writer: Writer,
) -> None:
    """A group runs without savepoints first; when a write that must fail alone fails, it is
    rolled back, what its writes took from memory is put back, and it runs again with a
    savepoint for each: the write before the failing one commits once, with what it took."""
    kept = {"title": "from memory"}

    def take_from_memory() -> None:
        title = kept.pop("title", None)
        if title is None:
            return
        undo_on_retry(lambda: kept.update(title=title))
        titled(title)

    outcomes: list[object] = await asyncio.gather(
        writer.now(take_from_memory), writer.now(raises), return_exceptions=True
    )
    assert outcomes[0] is None and isinstance(outcomes[1], ValueError)
    await writer.flush()
    assert await titles() == ["from memory"]
    assert kept == {}


async def test_closing_runs_every_queued_write_and_refuses_new_ones() -> None:
    writer = Writer()
    await writer.start()
    for n in range(5):
        writer.later(titled, f"t{n}")
    await writer.aclose()
    assert sorted(await titles()) == [f"t{n}" for n in range(5)]
    with pytest.raises(WriterNotRunning):
        writer.later(titled, "late")
