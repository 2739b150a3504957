"""Which workers are alive: a heartbeat row per worker, and on this host the process itself.

No runtime is started here: a started one beats for this process (in a thread, through
``sync_to_async``; one can still be on its way when a synchronous test begins), and a beat
landing between ``forget_worker`` and the check brought this worker back to life (1 run in
40 failed so under two pytest workers, before this module had no runtime)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from chatbridge.records.liveness import beat, forget_worker, worker_alive
from chatbridge.records.models import WorkerHeartbeat
from chatbridge.records.recorder import WORKER_ID

OTHER = "elsewhere:4242"  # a worker on another host: its liveness is its heartbeat alone


@pytest.mark.django_db(transaction=True)
def test_a_worker_is_alive_while_it_beats_and_its_process_exists() -> None:
    beat()
    assert worker_alive(WORKER_ID)
    forget_worker()
    assert not worker_alive(WORKER_ID)  # a clean stop: its calls may be taken over at once
    WorkerHeartbeat.objects.create(worker=OTHER, beat_at=timezone.now())
    assert worker_alive(OTHER)
    WorkerHeartbeat.objects.filter(worker=OTHER).update(
        beat_at=timezone.now() - timedelta(seconds=60)
    )
    assert not worker_alive(OTHER)  # silent too long
    host = WORKER_ID.rpartition(":")[0]
    dead = f"{host}:{2**22 + 7}"  # this host, a process id no process has
    WorkerHeartbeat.objects.create(worker=dead, beat_at=timezone.now())
    assert not worker_alive(dead)
    assert not worker_alive("")


@pytest.mark.django_db(transaction=True)
def test_a_request_routes_to_a_live_holder_elsewhere_found_in_one_statement() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from chatbridge.records.liveness import holder_alive_elsewhere
    from chatbridge.records.models import ToolSession

    def held_by(call_id: str, worker: str, status: str = "awaiting_elicit") -> None:
        ToolSession.objects.create(id=call_id, tool_name="t", status=status, worker=worker)

    WorkerHeartbeat.objects.create(worker=OTHER, beat_at=timezone.now())
    held_by("there", OTHER)
    with CaptureQueriesContext(connection) as read:
        assert holder_alive_elsewhere("there") == OTHER
    assert len(read.captured_queries) == 1  # the lease and the heartbeat together
    held_by("ended", OTHER, status="completed")
    assert holder_alive_elsewhere("ended") is None  # nobody holds an ended call
    assert holder_alive_elsewhere("unknown") is None
    beat()
    held_by("here", WORKER_ID)
    assert holder_alive_elsewhere("here") is None  # served here, not routed
    held_by("silent", "quiet:7")
    WorkerHeartbeat.objects.create(worker="quiet:7", beat_at=timezone.now() - timedelta(minutes=1))
    assert holder_alive_elsewhere("silent") is None  # its holder is gone: taken over here
    held_by("never", "never:8")
    assert holder_alive_elsewhere("never") is None  # no heartbeat at all
    WorkerHeartbeat.objects.filter(worker=OTHER).update(
        beat_at=timezone.now() - timedelta(seconds=60)
    )
    assert holder_alive_elsewhere("there") is None
    forget_worker()
