"""The caps per visitor and per client address hold exactly on PostgreSQL when workers race
for the last place: twelve threads, each with its own connection (as separate workers have),
enqueue to one visitor's chats and start turns in them at once, then twelve fresh visitors of
one address do; the advisory lock per visitor, and per address, lets exactly the cap
through."""

from __future__ import annotations

import json

import pytest

from tests.test_services import migrated_postgres_url, run_django  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.services, pytest.mark.slow]

RACE = """
import json, threading
from django.db import connection
from django.test.utils import override_settings
from chatbridge.records import store
from chatbridge.records.models import Conversation, QueueEntry
from chatbridge.engine.conversation import CommandRefused
from chatbridge.engine.turns import QueuedMessage

chats = [str(Conversation.objects.create(owner="session:racer").id) for _ in range(12)]
# Twelve fresh cookies of one address: a chat each.
fresh = [str(Conversation.objects.create(owner=f"session:fresh{n}").id) for n in range(12)]
start = threading.Barrier(12)
outcomes, by_address = [], []

def race(n, queue_into, turn_in, address, out):
    try:
        start.wait()
        try:
            store._enqueue(queue_into, QueuedMessage(f"{address}m{n}", "hi", address=address))
            out.append("queued")
        except CommandRefused as refused:
            out.append(refused.code)
        start.wait()
        try:
            took = store._take_new_turn(turn_in, "", address=address)
            out.append("turn" if took else "busy")
        except CommandRefused as refused:
            out.append(refused.code)
    finally:
        connection.close()

def racers(target):
    threads = [threading.Thread(target=target, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

with override_settings(
    CHATBRIDGE_QUEUE_PER_CONVERSATION=2,
    CHATBRIDGE_QUEUE_PER_VISITOR=5,
    CHATBRIDGE_RUNNING_TURNS_PER_VISITOR=4,
):
    racers(lambda n: race(n, chats[n % 3], chats[n], "", outcomes))
with override_settings(
    CHATBRIDGE_QUEUE_PER_ADDRESS=5,
    CHATBRIDGE_RUNNING_TURNS_PER_ADDRESS=4,
):
    racers(lambda n: race(n, fresh[n], fresh[n], "203.0.113.7", by_address))
print(json.dumps({
    "outcomes": sorted(outcomes),
    "rows": QueueEntry.objects.filter(owner="session:racer").count(),
    "turns": Conversation.objects.filter(owner="session:racer").exclude(turn_worker="").count(),
    "by_address": sorted(by_address),
    "address_rows": QueueEntry.objects.filter(owner__startswith="session:fresh").count(),
    "address_turns": Conversation.objects.filter(owner__startswith="session:fresh")
    .exclude(turn_worker="").count(),
}))
"""


def test_racing_workers_get_exactly_the_caps_on_postgresql(
    migrated_postgres_url: str,  # noqa: F811 (the fixture)
) -> None:
    database_url = migrated_postgres_url
    # A pool large enough for every racer's connection at once (they meet at a barrier).
    race = run_django(RACE, DATABASE_URL=database_url, DATABASE_POOL_SIZE="16")
    found = json.loads(race.splitlines()[-1])
    # Three chats, two places each, five for the visitor: five queued, seven refused.
    assert found["rows"] == 5
    # Twelve idle chats, four turns at once for the visitor: four started, eight refused.
    assert found["turns"] == 4
    assert found["outcomes"] == sorted(
        ["queued"] * 5 + ["QUEUE_FULL"] * 7 + ["turn"] * 4 + ["TOO_MANY_RUNNING"] * 8
    )
    # Twelve fresh visitors of one address: five queued and four turns for the address.
    assert (found["address_rows"], found["address_turns"]) == (5, 4)
    assert found["by_address"] == sorted(
        ["queued"] * 5 + ["QUEUE_FULL"] * 7 + ["turn"] * 4 + ["TOO_MANY_RUNNING"] * 8
    )
