"""Suspended calls and other workers: resuming a conversation's calls by replay, and routing
answers and commands to the worker that holds their call.

A call whose worker is gone is claimed (the store's ``claim``: the call's lease, taken by
compare-and-set on the holder seen) and resumed here by replaying its journal; an answer for
a call that a live worker holds is handed to that worker; an answer that arrives while its
call is being resumed waits for the question to show again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from chatbridge.author.exceptions import parse_refusal_code
from chatbridge.author.language import gettext as _
from chatbridge.author.language import gettext_noop
from chatbridge.engine.conversation import (
    CommandRefused,
    ConversationStore,
    LiveConversation,
    OnRecord,
    Peers,
    ResumableCall,
    TurnLeases,
    dangling_calls,
)
from chatbridge.engine.protocol import Abort, Approve, Deny, ElicitResponseCommand, Stop

if TYPE_CHECKING:
    from chatbridge.calls.manager import SessionManager

__all__ = ["CLOSED", "NOT_OPEN", "ROUTE_PATIENCE", "ROUTE_RETRY", "Recovery"]

logger = logging.getLogger("chatbridge.engine")

NOT_OPEN = gettext_noop("That question is no longer open, so this answer was not used.")
ROUTE_PATIENCE = 15.0  # seconds an answer waits for a live but unreachable owner
ROUTE_RETRY = 0.5
CLOSED = "That question is closed: its tool call has already finished, so this answer was not used."

StartTurn = Callable[
    [LiveConversation, list[ElicitResponseCommand], str | None, Sequence[ResumableCall]], None
]
BeginTurn = Callable[[LiveConversation, list[ElicitResponseCommand]], Awaitable[None]]
Deliver = Callable[[LiveConversation, ElicitResponseCommand], Awaitable[None]]


class Recovery:
    """The hub's recovery and cross-worker routing; ``ChatHub`` keeps the public methods."""

    def __init__(
        self,
        *,
        store: ConversationStore,
        leases: TurnLeases,
        manager: SessionManager,
        peers: Peers | None,
        start: StartTurn,
        begin: BeginTurn,
        deliver: Deliver,
    ) -> None:
        """What recovery needs and nothing more: the conversation store (messages, resumable
        calls, claims), the turn leases, the live sessions, the other workers, and the hub's
        three steps it drives (start a turn, begin one, deliver an answer)."""
        self.store, self.leases, self.manager, self.peers = store, leases, manager, peers
        self._start, self._begin, self._deliver = start, begin, deliver

    async def alive(self, worker: str) -> bool:
        """Is ``worker`` another live worker (by its heartbeat)?"""
        peers = self.peers
        return bool(worker) and peers is not None and await peers.alive(worker)

    async def recover(self, conv: LiveConversation, seen: OnRecord | None = None) -> bool:
        """Resume the conversation's orphaned calls here, or have the live worker running its
        turn show it again; True if a resuming turn started here. ``seen``: what a socket
        read of the conversation as it opened."""
        if (seen is None or seen.calls_open) and await self.resume_orphans(conv):
            return True
        peers = self.peers
        if not conv.busy and peers is not None:
            holder = (
                seen.turn_holder if seen is not None else await self.leases.turn_holder(conv.id)
            )
            if holder and await self.alive(holder):
                await peers.show(holder, conv.id)
        return False

    async def resume_orphans(self, conv: LiveConversation) -> bool:
        """Claim the suspended calls whose worker is gone and start a turn resuming them."""
        if conv.busy:
            return False
        conv.starting = asyncio.Event()  # answers arriving now wait for the outcome
        try:
            calls = [
                c
                for c in await self.store.resumable(conv.id)
                if self.manager.get(c.call_id) is None
            ]
            if not calls:
                return False
            holder = await self.leases.turn_holder(conv.id)
            if holder and await self.alive(holder):
                return False  # a live worker runs this conversation's turn
            orphans = [c for c in calls if not await self.alive(c.worker)]
            if not orphans or not await self.leases.take_turn(conv.id, replacing=holder):
                return False
            claimed = [c for c in orphans if await self.store.claim(c.call_id, c.worker)]
            if not claimed:
                await self.leases.release_turn(conv.id)
                return False
            for call in claimed:  # before the turn runs: answers arriving now wait for the form
                conv.resuming[call.call_id] = asyncio.Event()
            self._start(conv, [], None, claimed)
            return True
        finally:
            conv.starting.set()
            conv.starting = None

    async def unmatched_response(self, conv: LiveConversation, cmd: ElicitResponseCommand) -> None:
        """An answer for a call with no question open here: wait, route, resume or refuse."""
        if conv.starting is not None:  # a turn is being started: maybe the one resuming it
            await conv.starting.wait()
            if cmd.call_id in conv.pending:
                await self.deliver_when_shown(conv, cmd)
                return
        if cmd.call_id in conv.resuming:
            await self.deliver_when_shown(conv, cmd)  # being replayed: its form comes back
            return
        live_here = self.manager.get(cmd.call_id) is not None
        if live_here and cmd.call_id in conv.calls:
            # Live here with no question open (answered, the tool works on): nothing to wait for.
            raise CommandRefused("NOT_WAITING", _(NOT_OPEN))
        messages = await self.store.messages(conv.id)
        if cmd.call_id not in dangling_calls(messages):
            if cmd.call_id in _tool_calls(messages):  # it has ended (a copy is taken quietly)
                raise CommandRefused("CLOSED", CLOSED)
            raise CommandRefused("NOT_FOUND", f"No tool call {cmd.call_id!r} in this conversation.")
        if live_here:  # this conversation's call runs in this process: never an orphan
            raise CommandRefused("NOT_WAITING", _(NOT_OPEN))
        if await self.route(conv, cmd):
            return
        # Its journal survived: resume, then answer. Resuming may take other calls of the
        # conversation and not this one (claimed elsewhere, or no journal): then do not wait.
        if await self.resume_orphans(conv) and cmd.call_id in conv.resuming:
            await self.deliver_when_shown(conv, cmd)
            return
        await self._begin(conv, [cmd])

    async def deliver_when_shown(
        self, conv: LiveConversation, cmd: ElicitResponseCommand, timeout: float = 10.0
    ) -> None:
        """Deliver an answer for a call being resumed by replay once its question shows again.

        Only a call in ``conv.resuming`` is waited for, and only until its replay shows the
        question or ends: the socket that sent the answer handles nothing else meanwhile.
        """
        shown = conv.resuming.get(cmd.call_id)
        if shown is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(shown.wait(), timeout)
        if cmd.call_id in conv.pending:  # shown, or being drawn: the delivery waits for it
            await self._deliver(conv, cmd)
            return
        raise CommandRefused("NOT_WAITING", _(NOT_OPEN))

    async def route(self, conv: LiveConversation, cmd: ElicitResponseCommand) -> bool:
        """Hand the answer to the live worker holding its call; False once none holds it.

        A live owner that cannot be reached (its channel layer reconnecting) is tried again
        until it answers or its heartbeat expires; the answer is never dropped meanwhile.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ROUTE_PATIENCE
        while True:
            owner = next(
                (c.worker for c in await self.store.resumable(conv.id) if c.call_id == cmd.call_id),
                "",
            )
            if not await self.alive(owner):
                logger.info("answer for %s: owner %r is gone; resuming here", cmd.call_id, owner)
                return False
            peers = self.peers
            assert peers is not None
            if await peers.route(owner, conv.id, cmd):
                logger.info("answer for %s handed to worker %s", cmd.call_id, owner)
                return True  # the worker holding the session took the answer
            if loop.time() > deadline:
                raise CommandRefused(
                    "UNREACHABLE",
                    "The server holding this tool call is alive but cannot be reached right "
                    "now; please send your answer again in a moment.",
                )
            await asyncio.sleep(ROUTE_RETRY)  # back off before asking the owner again

    async def forward(
        self, worker: str, conversation_id: str, command: Abort | Approve | Deny | Stop
    ) -> bool:
        """Carry ``command`` out on ``worker``: True if done there; its refusal is raised."""
        peers = self.peers
        if not worker or peers is None:
            return False
        reply = await peers.forward(worker, conversation_id, command)
        if reply is None:
            return False
        if not reply.get("ok"):
            raise CommandRefused(parse_refusal_code(reply.get("code")), str(reply.get("message")))
        logger.info(
            "%s for conversation %s carried out by %s", command.type, conversation_id, worker
        )
        return True


def _tool_calls(messages: list[dict[str, Any]]) -> set[str]:
    """Ids of every tool call the model made in the conversation."""
    return {
        str(call.get("id"))
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or ()
    }
