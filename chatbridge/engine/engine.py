"""The chat engine: one run per user turn, as an explicit state machine (DESIGN §3).

``ChatHub`` is process-wide and owns every conversation's live state (``LiveConversation``):
the running turn (a task that outlives any socket), the current phase and the questions
waiting for an answer. Sockets come and go; they send commands to the hub and receive events
through the sink. Resuming suspended calls and routing to other workers is ``Recovery``'s
(engine/recovery.py); a turn's phases are ``Turns``' (engine/turns.py); tool calls are
``ToolCallRunner``'s (engine/tool_calls.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

from chatbridge.author.language import gettext as _
from chatbridge.author.language import gettext_noop
from chatbridge.author.plugins import FormPost, PluginRegistry
from chatbridge.calls.manager import SessionManager
from chatbridge.engine.completion import ToolCallRequest
from chatbridge.engine.controls import ANSWERS_REMEMBERED, SHOW_PATIENCE, Fork, HubControls
from chatbridge.engine.conversation import (
    LOST_SESSION_MESSAGE,
    CommandRefused,
    ConversationStore,
    EventSink,
    LiveConversation,
    LocalLeases,
    OnRecord,
    Peers,
    ResumableCall,
    TurnLeases,
    VisitorLimits,
    dangling_calls,
)
from chatbridge.engine.protocol import (
    ApprovalRequest,
    ConversationForked,
    ConversationState,
    ElicitResponseAck,
    ElicitResponseCommand,
    MessageQueued,
    Phase,
    check_move,
)
from chatbridge.engine.recovery import NOT_OPEN, Recovery
from chatbridge.engine.tool_calls import FormRenderer, ToolCallRunner, change_answer
from chatbridge.engine.turns import LocalQueue, MessageQueue, QueuedMessage, Turns

__all__ = [
    "LOST_SESSION_MESSAGE",
    "ChatHub",
    "CommandRefused",
    "ConversationStore",
    "dangling_calls",
]

logger = logging.getLogger("chatbridge.engine")

# Refusals, said in the person's language where they are raised (``_``).
SHUTTING_DOWN = gettext_noop("The server is restarting; please send that again in a moment.")
STALE_FORM = gettext_noop(
    "This form is out of date: a newer question is open, so this answer was not used."
)
BUSY_HERE = gettext_noop("Please wait for the current reply, or abort the running tool.")
BUSY_ELSEWHERE = gettext_noop(
    "Another server is running a reply in this conversation; please wait for it, or abort "
    "the running tool."
)


class ChatHub(HubControls):
    """Runs turns for every conversation of the process and routes commands to them."""

    def __init__(
        self,
        *,
        registry: PluginRegistry,
        manager: SessionManager,
        store: ConversationStore,
        sink: EventSink,
        render_form: FormRenderer,
        model: str,
        max_iterations: int = 8,
        peers: Peers | None = None,
        leases: TurnLeases | None = None,
        queue: MessageQueue | None = None,
        limits: VisitorLimits | None = None,
    ) -> None:
        self.registry, self.manager, self.store = registry, manager, store
        self.sink, self.render_form, self.model = sink, render_form, model
        self.max_iterations = max_iterations
        self.peers = peers  # the other workers, when there are several
        self.leases: TurnLeases = leases or LocalLeases()
        self.queue: MessageQueue = queue or LocalQueue()  # messages sent while a turn runs
        self.limits = limits  # caps per visitor on the turns new messages start
        self.runner = ToolCallRunner(
            registry=registry,
            manager=manager,
            sink=sink,
            render_form=render_form,
            set_phase=self.phase,
        )
        self._conversations: dict[str, LiveConversation] = {}
        # (conversation, elicit id) → (action, content) of the answer delivered for it
        self._delivered: OrderedDict[tuple[str, str], tuple[str, dict[str, Any]]] = OrderedDict()
        self._decided: OrderedDict[tuple[str, str], bool] = OrderedDict()  # approvals taken
        self._closed = False  # the process is shutting down: no new turns
        self.recovery = Recovery(
            store=store,
            leases=self.leases,
            manager=manager,
            peers=peers,
            start=self._start,
            begin=self._begin,
            deliver=self._deliver,
        )
        self.turns = Turns(
            store=store,
            leases=self.leases,
            queue=self.queue,
            manager=manager,
            registry=registry,
            runner=self.runner,
            sink=sink,
            set_phase=self.phase,
            model=model,
            max_iterations=max_iterations,
            next_queued=self.next_queued,
            forget=self.forget_if_idle,
        )

    # -- commands ---------------------------------------------------------------------------

    async def user_message(
        self,
        conversation_id: str,
        text: str,
        *,
        client_id: str | None = None,
        queue: bool = False,
        address: str = "",
    ) -> None:
        """Start a turn for ``text``; refused while a turn runs here or on another worker,
        unless ``queue``: then the message is kept (durably) and starts the next turn.
        ``address``: the sender's client address, which the caps per address count.

        A turn being started or resumed (a reconnecting socket checking for calls to resume)
        is waited for first: a message is refused only if a turn then runs.
        """
        with self._held(conversation_id) as conv:
            while conv.starting is not None and not conv.running:
                await conv.starting.wait()
            try:
                await self._begin(
                    conv, lost=[], text=text, client_id=client_id, new=True, address=address
                )
            except CommandRefused as refused:
                if not queue or refused.code != "BUSY":
                    raise
                message = QueuedMessage(uuid.uuid4().hex, text, client_id, address)
                await self.queue.enqueue(conv.id, message)
                await self.sink(
                    conv.id,
                    MessageQueued(message_id=message.id, content=text, client_id=client_id),
                )
                if not conv.busy:  # the turn ended meanwhile: nobody else will start it
                    await self.next_queued(conv)

    async def next_queued(self, conv: LiveConversation) -> bool:
        """Start a turn with the conversation's oldest queued message, if there is one and no
        turn runs; True if one started. A message stays queued until its turn has put it in
        the conversation (a restart in between starts it again)."""
        if conv.busy or self._closed:
            return False
        queued = await self.queue.queued(conv.id)
        if not queued or conv.busy:
            return False
        try:
            await self._begin(conv, lost=[], text=queued[0].text, queued=queued[0])
        except CommandRefused as refused:  # e.g. a turn runs on another worker: it starts it
            logger.info("conversation %s: queued message waits: %s", conv.id, refused)
            return False
        return True

    async def elicit_response(self, conversation_id: str, cmd: ElicitResponseCommand) -> None:
        """Deliver an answer to the form waiting for it (or handle a lost session).

        An answer that arrives while its form is being drawn (a call resumed by replay after a
        restart) waits for the form. A second copy of an answer already taken (same elicit id:
        a double click, another tab, a copy sent again by a reconnecting browser) is taken
        quietly and applied once; any other answer for a question no longer open is refused
        with a message saying so.
        """
        if cmd.session_id != cmd.call_id:
            raise CommandRefused(
                "BAD_COMMAND",
                f"This answer names session {cmd.session_id!r} and call {cmd.call_id!r}: a tool "
                "session's id is its call id, so send the call_id of the form as both.",
            )
        with self._held(conversation_id) as conv:
            try:
                if conv.pending.get(cmd.call_id) is None:
                    await self.recovery.unmatched_response(conv, cmd)
                    return
                await self._deliver(conv, cmd)
            except CommandRefused as refused:
                if refused.code not in ("NOT_WAITING", "STALE_ELICIT", "CLOSED", "NOT_FOUND"):
                    raise
                self._late_answer(conv.id, cmd, refused)

    async def _deliver(self, conv: LiveConversation, cmd: ElicitResponseCommand) -> None:
        pending = conv.pending.get(cmd.call_id)
        if pending is None:
            raise CommandRefused("NOT_WAITING", _(NOT_OPEN))
        if (pending.session_id, pending.elicit_id) != (cmd.session_id, cmd.elicit_id):
            raise CommandRefused("STALE_ELICIT", _(STALE_FORM))
        # Its form may be being drawn (a replayed call, a redraw after a refused answer).
        shown = await pending.wait_shown(SHOW_PATIENCE)
        if not shown or conv.pending.get(cmd.call_id) is not pending:
            raise CommandRefused("NOT_WAITING", _(NOT_OPEN))
        if cmd.change:
            await change_answer(pending.session, cmd.elicit_id, cmd.change)
        elif not pending.deliver(FormPost(cmd.action, dict(cmd.content))):
            raise CommandRefused("NOT_WAITING", _(NOT_OPEN))
        self._delivered[conv.id, cmd.elicit_id] = cmd.given()
        self._delivered.move_to_end((conv.id, cmd.elicit_id))
        while len(self._delivered) > ANSWERS_REMEMBERED:
            self._delivered.popitem(last=False)
        if not cmd.change:
            ack = ElicitResponseAck(call_id=cmd.call_id, elicit_id=cmd.elicit_id, action=cmd.action)
            await self.sink(conv.id, ack)

    def page_at(self, conversation_id: str, origin: str) -> None:
        """A socket of the conversation came from ``origin``: its calls' links point there."""
        self.runner.page_at(conversation_id, origin)

    def state(self, conversation_id: str) -> ConversationState:
        """The conversation's state here (idle when this process holds nothing for it)."""
        conv = self._conversations.get(conversation_id)
        return self._state(conv or LiveConversation(conversation_id))

    def _state(self, conv: LiveConversation) -> ConversationState:
        return ConversationState(
            conversation_id=conv.id,
            phase=conv.phase,
            running=conv.running,
            pending=list(conv.pending),
            approvals=[
                ApprovalRequest(call_id=a.call_id, tool_name=a.tool_name, arguments=a.arguments)
                for a in conv.approvals.values()
            ],
        )

    def held(self) -> int:
        """How many conversations this process holds state for (running or waiting)."""
        return len(self._conversations)

    def pending_forms(self, conversation_id: str) -> list[Any]:
        """The forms open right now, for a socket that (re)connects."""
        conv = self._conversations.get(conversation_id)
        return [p.form for p in conv.pending.values() if p.form is not None] if conv else []

    async def close(self) -> None:
        """Stop every turn without recording anything (process shutdown); start no more."""
        self._closed = True
        turns = [c.turn for c in self._conversations.values() if c.turn is not None]
        for turn in turns:
            turn.cancel()
        for conv in self._conversations.values():
            for call_id in list(conv.resuming):
                conv.resumed(call_id)
        if turns:
            await asyncio.wait(turns)
        self._conversations.clear()

    async def wait_idle(self, conversation_id: str) -> None:
        """Wait for the running turn (tests and shutdown)."""
        conv = self._conversations.get(conversation_id)
        if conv is not None and conv.turn is not None:
            await asyncio.wait({conv.turn})

    # -- the turn ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _held(self, conversation_id: str) -> Iterator[LiveConversation]:
        """The conversation's live state, kept for a command that works with it across
        awaits: a turn ending meanwhile does not forget the state in which this command may
        still start the next turn (a second one would not show that turn, nor take its
        answers)."""
        conv = self._conversations.get(conversation_id)
        if conv is None:
            conv = self._conversations[conversation_id] = LiveConversation(conversation_id)
        conv.holders += 1
        try:
            yield conv
        finally:
            conv.holders -= 1
            self.forget_if_idle(conv)

    def forget_if_idle(self, conv: LiveConversation) -> None:
        """Drop the conversation's state once nothing runs, waits or holds it."""
        if conv.busy or conv.holders or conv.pending or conv.approvals or conv.resuming:
            return  # held: its calls are looked at when it is let go
        conv.calls = {c for c in conv.calls if self.manager.get(c) is not None}
        if conv.calls:
            return
        if self._conversations.get(conv.id) is conv:
            del self._conversations[conv.id]

    async def _begin(
        self,
        conv: LiveConversation,
        lost: list[ElicitResponseCommand],
        text: str | None = None,
        *,
        client_id: str | None = None,
        queued: QueuedMessage | None = None,
        new: bool = False,
        fork: Fork | None = None,
        address: str = "",
    ) -> None:
        """Take the conversation's lease and start a turn; BUSY if one runs anywhere. A turn
        for a ``new`` message is capped per visitor and per ``address`` (``VisitorLimits``).
        With ``fork`` (message id, edited), the conversation forks there first, holding the
        lease."""
        if self._closed:
            raise CommandRefused("SHUTTING_DOWN", _(SHUTTING_DOWN))
        if conv.busy:
            raise CommandRefused("BUSY", _(BUSY_HERE))
        take = (
            functools.partial(self.limits.take_new_turn, address=address)
            if new and self.limits
            else self.leases.take_turn
        )
        conv.starting = asyncio.Event()  # at once: a second message now sees BUSY
        try:
            taken = await take(conv.id)
            if not taken:  # held elsewhere: by a worker that is gone, its lease not expired?
                holder = await self.leases.turn_holder(conv.id)
                if holder and self.peers is not None and not await self.recovery.alive(holder):
                    taken = await take(conv.id, replacing=holder)
        finally:
            conv.starting.set()
            conv.starting = None
        if not taken:
            raise CommandRefused("BUSY", _(BUSY_ELSEWHERE))
        if fork is not None:
            try:
                messages, calls = await self.store.fork(conv.id, fork[0], edit=fork[1])
            except BaseException:
                await self.leases.release_turn(conv.id)  # refused: no turn starts
                raise
            await self.sink(conv.id, ConversationForked(messages=messages, calls=calls))
        self._start(conv, lost=lost, text=text, client_id=client_id, queued=queued)

    def _start(
        self,
        conv: LiveConversation,
        lost: list[ElicitResponseCommand],
        text: str | None = None,
        resume: Sequence[ResumableCall] = (),
        *,
        client_id: str | None = None,
        queued: QueuedMessage | None = None,
    ) -> None:
        conv.turn = asyncio.create_task(
            self.turns.run(conv, lost, text, resume, client_id=client_id, queued=queued),
            name=f"chatbridge-turn:{conv.id}",
        )

    async def recover(self, conversation_id: str, seen: OnRecord | None = None) -> bool:
        """A socket (re)connects: resume the conversation's suspended calls that no live worker
        holds (by replay), or have the live worker running its turn show it again. ``seen``:
        what the socket read of the conversation as it opened (nothing is read again that
        it says is not there)."""
        if self._closed:
            return False  # shutting down: the next process resumes them
        with self._held(conversation_id) as conv:
            resumed = await self.recovery.recover(conv, seen)
            # Messages queued before a restart (or on another worker).
            if not resumed and (seen is None or seen.queued):
                await self.next_queued(conv)
            return resumed

    async def show(self, conversation_id: str) -> None:
        """Send the conversation's state and open forms again, to every socket (a socket on
        another worker asked for them)."""
        conv = self._conversations.get(conversation_id)
        if conv is None:
            return
        await self.sink(conv.id, self._state(conv))
        for form in self.pending_forms(conversation_id):
            await self.sink(conv.id, form)

    async def phase(self, conv: LiveConversation, phase: Phase) -> None:
        """Enter ``phase`` (a move ``protocol.TRANSITIONS`` allows): on record (for the
        admin) and to every socket."""
        check_move(conv.phase, phase)
        conv.phase = phase
        await self.store.save_phase(conv.id, phase)
        await self.sink(conv.id, self._state(conv))

    async def execute_tool_call(self, conversation_id: str, call: ToolCallRequest) -> str:
        """Run one tool call to its end; return the tool message for the model."""
        with self._held(conversation_id) as conv:
            return (await self.runner.run(conv, call)).content
