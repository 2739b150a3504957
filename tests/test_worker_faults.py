"""Workers under faults, on a Redis of the test's own: publishing is best effort, the listener
comes back after Redis restarts, a call stays with its live owner, one turn per conversation."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from channels.layers import channel_layers, get_channel_layer
from django.test import override_settings

from chatbridge import PluginRegistry, SessionManager
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.calls.links import MemoryUrlLinks
from chatbridge.cluster.broadcast import Broadcast, Viewers
from chatbridge.cluster.messages import Showing
from chatbridge.engine.conversation import ResumableCall
from chatbridge.engine.engine import BUSY_ELSEWHERE, ChatHub
from chatbridge.engine.protocol import ElicitResponseCommand
from plugins.book_flight.data import seat_map_for
from plugins.book_flight.plugin import book_flight_plugin
from tests.chat_http import RemoteChat
from tests.servers import fixed_port, free_port, start_daphne, start_each, stop, wait_for_port
from tests.test_hub_memory import Inboxes, MemoryStore, pay

BOOK = {"type": "user_message", "text": "Book a flight from JFK to LAX"}


class OwnRedis:
    """A redis-server of the test's own (no persistence: a restart forgets everything)."""

    def __init__(self) -> None:
        self.port = fixed_port()  # restarted on the same port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        wait_for_port(self.port, self.proc)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    redis = OwnRedis()
    redis.start()
    try:
        yield redis
    finally:
        if redis.proc is not None and redis.proc.poll() is None:
            redis.kill()


@pytest.fixture
async def redis_layer(own_redis: OwnRedis) -> AsyncIterator[OwnRedis]:
    """This process's channel layer on ``own_redis``."""
    layers = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [own_redis.url]},
        }
    }
    with override_settings(CHANNEL_LAYERS=layers):
        channel_layers.backends.clear()
        yield own_redis
        channel_layers.backends.clear()


def answer(form: dict[str, Any], **content: Any) -> ElicitResponseCommand:
    return ElicitResponseCommand(
        type="elicit_response",
        session_id=form["session_id"],
        call_id=form["call_id"],
        elicit_id=form["elicit_id"],
        content=content,
    )


async def test_a_redis_blip_does_not_fail_a_call_that_completes(redis_layer: OwnRedis) -> None:
    layer = get_channel_layer()
    assert layer is not None
    watcher = await layer.new_channel()  # another worker's listener, showing "conv"
    broadcast = Broadcast(Viewers())  # this worker's, without a listener
    broadcast.viewers.heard(Showing(worker="vm:1", channel=watcher, conversations=["conv"]))

    async def next_form(key: str) -> dict[str, Any]:
        while True:
            event = (await asyncio.wait_for(layer.receive(watcher), 20))["event"]
            if event["type"] == "elicit" and event["key"] == key:
                return dict(event)

    store = MemoryStore()
    links = MemoryUrlLinks()
    manager = SessionManager(sampler=LiteLLMSampler("offline/faults"), url_links=links)
    hub = ChatHub(
        registry=PluginRegistry([book_flight_plugin]),
        manager=manager,
        store=store,
        sink=broadcast.publish,
        render_form=lambda *a, **k: "",
        model="offline/faults",
    )
    try:
        await hub.user_message("conv", "Book a flight from JFK to LAX")
        flights = await next_form("pick_flight")
        flight_id = flights["context"]["flights"][0]["id"]
        await hub.elicit_response("conv", answer(flights, flight_id=flight_id))
        seats = await next_form("pick_seat")
        label = seat_map_for(flight_id).first_free()
        await hub.elicit_response("conv", answer(seats, seat_label=label))
        await hub.elicit_response("conv", answer(await next_form("review"), confirm=True))
        payment = await next_form("payment")

        redis_layer.kill()  # every event from now on fails to publish
        await pay(links, payment["url"], manager)  # the page reports: the call goes on
        await asyncio.wait_for(hub.wait_idle("conv"), 30)
    finally:
        await hub.close()
        await manager.shutdown()

    [tool] = [m for m in store.messages_by_conv["conv"] if m["role"] == "tool"]
    result = json.loads(tool["content"])  # a result, not "Error: The tool call failed ..."
    assert (result["booked"], result["seat"]) == (True, label)
    assert store.messages_by_conv["conv"][-1]["role"] == "assistant"


class TakeoverStore(MemoryStore):
    """Messages of a crashed worker's conversation, its call's journal, and a claim that
    waits for the test (the database is slow while a takeover is in progress)."""

    def __init__(self, messages: dict[str, list[dict[str, Any]]], call: ResumableCall) -> None:
        super().__init__()
        self.messages_by_conv.update(messages)
        self.call, self.gate, self.claims = call, asyncio.Event(), 0
        self.claiming = asyncio.Event()  # a claim reached the database and waits for it

    async def resumable(self, conversation_id: str) -> list[Any]:
        return [] if self.claims else [self.call]

    async def claim(self, call_id: str, worker: str) -> bool:
        self.claiming.set()
        await self.gate.wait()
        self.claims += 1
        return self.claims == 1


def book_flight_hub(store: Any, inboxes: Inboxes) -> ChatHub:
    return ChatHub(
        registry=PluginRegistry([book_flight_plugin]),
        manager=SessionManager(
            sampler=LiteLLMSampler("offline/faults"), url_links=MemoryUrlLinks()
        ),
        store=store,
        sink=inboxes.sink,
        render_form=lambda *a, **k: "",
        model="offline/faults",
    )


async def test_an_answer_arriving_while_its_call_is_being_resumed_is_delivered() -> None:
    crashed_inboxes, inboxes = Inboxes(), Inboxes()
    crashed = book_flight_hub(MemoryStore(), crashed_inboxes)
    await crashed.user_message("conv", "Book a flight from JFK to LAX")
    flights = (await crashed_inboxes.next("conv", "elicit", key="pick_flight")).model_dump()
    flight_id = flights["context"]["flights"][0]["id"]
    await crashed.elicit_response("conv", answer(flights, flight_id=flight_id))
    seats = (await crashed_inboxes.next("conv", "elicit", key="pick_seat")).model_dump()
    session = crashed.manager.get(seats["call_id"])
    assert session is not None
    call = ResumableCall(
        seats["call_id"],
        "book_flight",
        {"origin": "JFK", "destination": "LAX"},
        session.journal,
        "gone-host:1",
    )
    assert isinstance(crashed.store, MemoryStore)
    store = TakeoverStore(dict(crashed.store.messages_by_conv), call)
    await crashed.close()  # the crash: nothing more from this process
    await crashed.manager.shutdown()

    hub = book_flight_hub(store, inboxes)
    try:
        reconnect = asyncio.create_task(hub.recover("conv"))  # a socket connects: takeover
        await store.claiming.wait()  # the takeover is under way, its claim not answered yet
        label = seat_map_for(flight_id).first_free()
        resent = asyncio.create_task(hub.elicit_response("conv", answer(seats, seat_label=label)))
        # Created before the claim is answered, the answer's task runs first (tasks start in
        # order): it arrives while the call is being resumed.
        store.gate.set()
        assert await reconnect is True
        await asyncio.wait_for(resent, 20)  # delivered: not refused as BUSY
        review = await inboxes.next("conv", "elicit", key="review")
        await hub.elicit_response("conv", answer(review.model_dump(), confirm=True))
        payment = await inboxes.next("conv", "elicit", key="payment")
        assert isinstance(hub.manager.url_links, MemoryUrlLinks)
        await pay(hub.manager.url_links, payment.url, hub.manager)
        done = await inboxes.next("conv", "tool_call", status="completed")
        assert done.result is not None and done.result["seat"] == label
        await asyncio.wait_for(hub.wait_idle("conv"), 20)
    finally:
        await hub.close()
        await hub.manager.shutdown()
    assert store.claims == 1
    tools = [m for m in store.messages_by_conv["conv"] if m["role"] == "tool"]
    assert [json.loads(m["content"])["booked"] for m in tools] == [True]


class HeldLease:
    """A conversation lease held by another worker, in memory."""

    def __init__(self, holder: str) -> None:
        self.holder = holder

    async def take_turn(self, conversation_id: str, replacing: str = "") -> bool:
        if self.holder in ("", "me", replacing):
            self.holder = "me"
            return True
        return False

    async def renew_turn(self, conversation_id: str) -> bool:
        return self.holder == "me"

    async def release_turn(self, conversation_id: str) -> bool:
        if self.holder == "me":
            self.holder = ""
        return True  # messages may be queued: this lease does not know

    async def turn_holder(self, conversation_id: str) -> str:
        return self.holder


class Heartbeats:
    """Peers whose liveness is a set of names; nothing is routed."""

    def __init__(self, *alive: str) -> None:
        self.living = set(alive)

    async def alive(self, worker: str) -> bool:
        return worker in self.living

    async def route(self, worker: str, conversation_id: str, command: Any) -> None:
        return None

    async def show(self, worker: str, conversation_id: str) -> None:
        return None

    async def forward(self, worker: str, conversation_id: str, command: Any) -> None:
        return None


@pytest.mark.parametrize("holder_alive", [True, False])
async def test_a_message_is_busy_while_a_live_worker_holds_the_turn(holder_alive: bool) -> None:
    from chatbridge.engine.engine import CommandRefused

    inboxes, lease = Inboxes(), HeldLease("worker-2")
    hub = ChatHub(
        registry=PluginRegistry([book_flight_plugin]),
        manager=SessionManager(sampler=LiteLLMSampler("offline/faults")),
        store=MemoryStore(),
        sink=inboxes.sink,
        render_form=lambda *a, **k: "",
        model="offline/faults",
        peers=Heartbeats("worker-2") if holder_alive else Heartbeats(),
        leases=lease,
    )
    try:
        if holder_alive:
            with pytest.raises(CommandRefused) as refused:
                await hub.user_message("conv", "Book a flight from JFK to LAX")
            assert (refused.value.code, str(refused.value)) == ("BUSY", BUSY_ELSEWHERE)
            assert hub.held() == 0 and lease.holder == "worker-2"
        else:  # its heartbeat expired: the lease is taken over before it expires
            await hub.user_message("conv", "Book a flight from JFK to LAX")
            await inboxes.next("conv", "elicit", key="pick_flight")
            assert lease.holder == "me"
    finally:
        await hub.close()
        await hub.manager.shutdown()
    assert lease.holder in ("", "worker-2")  # released when the turn ended


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_runtime")
async def test_the_turn_lease_goes_to_one_worker_and_only_then_to_another() -> None:
    from asgiref.sync import sync_to_async
    from django.utils import timezone

    from chatbridge.records import store as stores
    from chatbridge.records.models import Conversation, WorkerHeartbeat
    from chatbridge.records.recorder import WORKER_ID

    conversation = await Conversation.objects.acreate(owner="session:x")
    cid = str(conversation.id)
    leases = stores.DjangoStore()
    taken = await asyncio.gather(*(leases.take_turn(cid) for _ in range(5)))
    assert taken == [True] * 5  # all this worker's: the hub excludes a second turn itself
    assert await leases.turn_holder(cid) == WORKER_ID

    # Another worker (on another host) holds it: refused until it expires or is replaced.
    other = "elsewhere:42"
    soon = timezone.now() + timedelta(seconds=30)
    await Conversation.objects.filter(pk=cid).aupdate(turn_worker=other, turn_expires=soon)
    assert await leases.take_turn(cid) is False
    assert await leases.renew_turn(cid) is False
    await leases.release_turn(cid)  # not ours: nothing happens
    assert await leases.turn_holder(cid) == other
    assert await leases.take_turn(cid, replacing=other) is True  # its owner is known dead
    await Conversation.objects.filter(pk=cid).aupdate(
        turn_worker=other, turn_expires=timezone.now() - timedelta(seconds=1)
    )
    assert await leases.turn_holder(cid) == ""
    assert await leases.take_turn(cid) is True  # expired
    await leases.release_turn(cid)
    assert await leases.turn_holder(cid) == ""

    # Liveness is a recent heartbeat; a process of this host that is gone is dead at once.
    alive = sync_to_async(stores.worker_alive)
    await WorkerHeartbeat.objects.acreate(worker=other, beat_at=timezone.now())
    assert await alive(other) is True
    stale = timezone.now() - timedelta(seconds=stores.HEARTBEAT_TTL + 1)
    await WorkerHeartbeat.objects.filter(pk=other).aupdate(beat_at=stale)
    assert await alive(other) is False
    gone = subprocess.Popen(["true"])
    gone.wait()
    here = f"{WORKER_ID.rpartition(':')[0]}:{gone.pid}"
    await WorkerHeartbeat.objects.acreate(worker=here, beat_at=timezone.now())
    assert await alive(here) is False


@pytest.mark.django_db(transaction=True)
async def test_the_listener_rejoins_after_redis_restarts_and_stops_cleanly(
    redis_layer: OwnRedis,
) -> None:
    from chatbridge.cluster.peers import query_workers
    from chatbridge.records.models import WorkerHeartbeat
    from chatbridge.records.recorder import WORKER_ID
    from chatbridge.runtime import ChatBridgeRuntime

    async def answering(timeout: float = 20) -> list[str]:
        """The workers answering a list request, asked until this one answers."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                workers = [str(r["worker"]) for r in await query_workers(timeout=0.5)]
            except Exception:  # Redis is still coming back
                workers = []
            if WORKER_ID in workers or time.monotonic() > deadline:
                return workers

    runtime = ChatBridgeRuntime.from_settings()
    await runtime.start()  # its listener answers the workers' list request
    try:
        assert await answering() == [WORKER_ID]
        redis_layer.kill()
        redis_layer.start()  # empty: the listener's groups are gone
        assert await answering() == [WORKER_ID]
        assert await WorkerHeartbeat.objects.filter(pk=WORKER_ID).aexists()
    finally:
        await runtime.aclose()  # stops the listener and forgets the heartbeat
    assert not await WorkerHeartbeat.objects.filter(pk=WORKER_ID).aexists()
    assert await query_workers(timeout=0.5) == []


# -- two daphne workers on PostgreSQL and the test's own Redis --------------------------------


@pytest.fixture
def cluster(own_redis: OwnRedis) -> Iterator[dict[str, str]]:
    from tests.test_scale_out import cluster_database

    with cluster_database(own_redis.url) as env:
        yield env


async def wait_connect(chat: RemoteChat, base: str, timeout: float = 20) -> None:
    """Connect, retrying while the server refuses (its channel layer is reconnecting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await chat.connect(base)
            await chat.next("conversation_state", timeout=5)
            return
        except (aiohttp.ClientError, AssertionError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            chat.socket = None
            await asyncio.sleep(0.2)  # back off before the next attempt, like a browser


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(180)
async def test_two_messages_and_an_abort_at_once_on_two_workers_run_one_turn(
    cluster: dict[str, str],
) -> None:
    ports = free_port(), free_port()
    workers = start_each(*(functools.partial(start_daphne, port, cluster) for port in ports))
    base_a, base_b = (f"http://127.0.0.1:{port}" for port in ports)
    try:
        async with aiohttp.ClientSession() as http:
            on_a = await RemoteChat.open(http, base_a)
            on_b = RemoteChat(http, on_a.cookie, on_a.conversation_id)
            await on_a.connect(base_a)
            await on_b.connect(base_b)
            await asyncio.gather(on_a.send(BOOK), on_b.send(BOOK))  # both at once

            form_a = await on_a.next("elicit", key="pick_flight")
            form_b = await on_b.next("elicit", key="pick_flight")
            assert form_a["call_id"] == form_b["call_id"]  # one turn, seen on both workers
            refused = {
                name: [e["code"] for e in chat.events if e["type"] == "error"]
                for name, chat in (("a", on_a), ("b", on_b))
            }
            assert sorted(refused.values()) == [[], ["BUSY"]], refused
            assert [e["type"] for e in on_a.events].count("user_message") == 1
            # The worker that refused the message does not hold the turn.
            owner, other = (on_a, on_b) if refused["b"] else (on_b, on_a)
            [busy] = [e for e in other.events if e["type"] == "error"]
            assert busy["message"] == BUSY_ELSEWHERE

            # A message on the owner and an abort on the other worker, at once: the abort is
            # carried to the owner, which stops the tool; the message is refused (turn runs).
            abort = {"type": "abort", "session_id": form_a["session_id"], "reason": "changed mind"}
            await asyncio.gather(owner.send(BOOK), other.send(abort))
            aborted = await other.next("tool_call", status="aborted")
            assert (aborted["call_id"], aborted["error"]) == (form_a["call_id"], "changed mind")
            await owner.next("error", code="BUSY")
            await other.next("assistant_message")
            assert [e["code"] for e in other.events if e["type"] == "error"] == ["BUSY"]
            assert [e["type"] for e in other.events].count("user_message") == 1

            # An approval asked by the owner's turn, approved on the other worker.
            await owner.next("conversation_state", phase="done", running=False)
            await owner.send({"type": "user_message", "text": "Send feedback"})
            request = await other.next("approval_request")
            await other.send({"type": "approve", "call_id": request["call_id"]})
            form = await other.next("elicit", key="feedback")
            assert form["call_id"] == request["call_id"]
            # A page reloaded on the worker that does not hold the turn sees the open question.
            reloaded = RemoteChat(http, on_a.cookie, on_a.conversation_id)
            await reloaded.connect(base_b if other is on_b else base_a)
            again = await reloaded.next("elicit", key="feedback")
            assert again["elicit_id"] == form["elicit_id"]
            await reloaded.close()
            stop_it = {"type": "abort", "session_id": form["session_id"], "reason": "enough"}
            await other.send(stop_it)
            await owner.next("tool_call", status="aborted")
            for chat in (on_a, on_b):
                await chat.close()
    finally:
        for proc in workers:
            stop(proc)


def cluster_rows(env: dict[str, str], call_id: str) -> dict[str, Any]:
    """What the database says about a call: its row, journal and tool messages."""
    import psycopg

    url = env["DATABASE_URL"].replace("postgres://", "postgresql://")
    with psycopg.connect(url) as db:
        status, worker, resumes, result = db.execute(
            "SELECT status, worker, resumes, result FROM chatbridge_chat_toolsession WHERE id = %s",
            (call_id,),
        ).fetchone()
        steps = db.execute(
            "SELECT result FROM chatbridge_chat_journalrecord WHERE session_id = %s "
            "AND kind = 'step'",
            (call_id,),
        ).fetchall()
        messages = db.execute(
            "SELECT content FROM chatbridge_chat_message WHERE tool_call_id = %s", (call_id,)
        ).fetchall()
    return {
        "status": status,
        "worker": worker,
        "resumes": resumes,
        "result": result,
        "steps": [r for (r,) in steps],
        "tool_messages": [json.loads(c) if c.startswith("{") else c for (c,) in messages],
    }


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.timeout(180)
async def test_redis_restarted_under_two_workers_loses_no_answer_and_books_once(
    own_redis: OwnRedis, cluster: dict[str, str]
) -> None:
    ports = free_port(), free_port()
    workers = start_each(*(functools.partial(start_daphne, port, cluster) for port in ports))
    base_a, base_b = (f"http://127.0.0.1:{port}" for port in ports)
    try:
        async with aiohttp.ClientSession() as http:
            chat = await RemoteChat.open(http, base_a)
            await chat.connect(base_a)
            await chat.send(BOOK)
            flights = await chat.next("elicit", key="pick_flight")
            flight_id = flights["context"]["flights"][0]["id"]
            await chat.answer(flights, flight_id=flight_id)
            seats = await chat.next("elicit", key="pick_seat")  # worker A holds the call

            own_redis.kill()  # every group and channel is gone with it
            own_redis.start()
            await chat.close()

            # The browser comes back on worker B and sends its answer: B must hand it to A,
            # which is alive (its heartbeat is in the database) and still runs the tool.
            on_b = RemoteChat(http, chat.cookie, chat.conversation_id)
            await wait_connect(on_b, base_b)
            label = seat_map_for(flight_id).first_free()
            await on_b.answer(seats, seat_label=label)
            await on_b.review_and_pay(timeout=40, base=base_b)
            done = await on_b.next("tool_call", status="completed", timeout=40)
            assert (done["result"]["booked"], done["result"]["seat"]) == (True, label)
            reply = await on_b.next("assistant_message", timeout=20)
            assert done["result"]["ticket"] in reply["content"]
            assert [e for e in on_b.events if e["type"] == "error"] == []
            await on_b.close()
    finally:
        for proc in workers:
            stop(proc)

    rows = cluster_rows(cluster, seats["call_id"])
    assert (rows["status"], rows["resumes"]) == ("completed", 0)  # never taken over
    assert rows["worker"].endswith(f":{workers[0].pid}")
    [ticket] = rows["steps"]  # issued once
    assert done["result"]["ticket"] in json.dumps(ticket)
    assert rows["result"]["ticket"] == done["result"]["ticket"]
    assert rows["tool_messages"] == [done["result"]]  # one consistent result
