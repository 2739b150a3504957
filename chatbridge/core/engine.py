"""The chat engine: one run per user turn, as an explicit state machine (DESIGN §3).

``ChatHub`` is process-wide and owns every conversation's live state (``LiveConversation``):
the running turn (a task that outlives any socket), the current phase and the questions
waiting for an answer. Sockets come and go; they send commands to the hub and receive events
through the sink. Resuming suspended calls and routing to other workers is ``Recovery``'s
(core/recovery.py); a turn's phases are ``Turns``' (core/turns.py); tool calls are
``ToolCallRunner``'s (core/tool_calls.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from chatbridge.core.commitment import abort_decision_text
from chatbridge.core.completion import ToolCallRequest
from chatbridge.core.conversation import (
    LOST_SESSION_MESSAGE,
    CommandRefused,
    ConversationStore,
    EventSink,
    LiveConversation,
    LocalLeases,
    Peers,
    ResumableCall,
    TurnLeases,
    VisitorLimits,
    dangling_calls,
)
from chatbridge.core.forms import FormRenderer
from chatbridge.core.manager import SessionManager
from chatbridge.core.plugins import FormPost, PluginRegistry
from chatbridge.core.protocol import (
    Abort,
    ApprovalRequest,
    Approve,
    ConversationState,
    Deny,
    ElicitResponseAck,
    ElicitResponseCommand,
    MessageQueued,
    Phase,
    Stop,
)
from chatbridge.core.recovery import NOT_OPEN, Recovery
from chatbridge.core.tool_calls import ToolCallRunner
from chatbridge.core.turns import LocalQueue, MessageQueue, QueuedMessage, Turns

__all__ = [
    "LOST_SESSION_MESSAGE",
    "ChatHub",
    "CommandRefused",
    "ConversationStore",
    "dangling_calls",
]

logger = logging.getLogger("chatbridge.engine")

SHUTTING_DOWN = "The server is restarting; please send that again in a moment."
STALE_FORM = "This form is out of date: a newer question is open, so this answer was not used."
SHOW_PATIENCE = 10.0  # seconds an answer waits for its form to be drawn (a replay, a redraw)
ANSWERS_REMEMBERED = 2000  # answers delivered here: a second copy of one is taken quietly
_CLOSED_AS = {"decline": "declined", "cancel": "cancelled"}
BUSY_ELSEWHERE = (
    "Another server is running a reply in this conversation; please wait for it, or abort "
    "the running tool."
)


class ChatHub:
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
        self.recovery = Recovery(self, start=self._start, begin=self._begin, deliver=self._deliver)
        self.turns = Turns(self)

    # -- commands ---------------------------------------------------------------------------

    async def user_message(
        self,
        conversation_id: str,
        text: str,
        *,
        client_id: str | None = None,
        queue: bool = False,
    ) -> None:
        """Start a turn for ``text``; refused while a turn runs here or on another worker,
        unless ``queue``: then the message is kept (durably) and starts the next turn.

        A turn being started or resumed (a reconnecting socket checking for calls to resume)
        is waited for first: a message is refused only if a turn then runs.
        """
        conv = self._conversation(conversation_id)
        while conv.starting is not None and not conv.running:
            await conv.starting.wait()
            conv = self._conversation(conversation_id)  # it may have been forgotten meanwhile
        try:
            try:
                await self._begin(conv, lost=[], text=text, client_id=client_id, new=True)
            except CommandRefused as refused:
                if not queue or refused.code != "BUSY":
                    raise
                message = QueuedMessage(uuid.uuid4().hex, text, client_id)
                await self.queue.enqueue(conv.id, message)
                await self.sink(
                    conv.id,
                    MessageQueued(message_id=message.id, content=text, client_id=client_id),
                )
                if not conv.busy:  # the turn ended meanwhile: nobody else will start it
                    await self.next_queued(conv)
        finally:
            self.forget_if_idle(conv)

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

    async def stop(self, conversation_id: str, *, routed: bool = False) -> None:
        """Stop the reply the model is writing in the conversation (the ``stop`` command), on
        whichever worker runs its turn.

        The text shown so far stays as the reply; running tool calls are not affected (they
        have ``abort``). Nothing streaming (the reply just ended): nothing to do.
        """
        if self.turns.stop(conversation_id):
            return
        if not routed and self.peers is not None:
            holder = await self.leases.turn_holder(conversation_id)
            if await self.recovery.forward(holder, conversation_id, Stop(type="stop")):
                return
        logger.debug("conversation %s: stop with no reply streaming", conversation_id)

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
        conv = self._conversation(conversation_id)
        try:
            pending = conv.pending.get(cmd.call_id)
            if pending is None:
                await self.recovery.unmatched_response(conv, cmd)
                return
            await self._deliver(conv, cmd)
        except CommandRefused as refused:
            if refused.code not in ("NOT_WAITING", "STALE_ELICIT", "CLOSED", "NOT_FOUND"):
                raise
            self._late_answer(conv.id, cmd, refused)
        finally:
            self.forget_if_idle(conv)

    def _late_answer(
        self, conversation_id: str, cmd: ElicitResponseCommand, refused: CommandRefused
    ) -> None:
        """An answer for a question that is not open: return quietly for a copy of the answer
        it was given; otherwise raise ``refused``, or say how the question was closed."""
        taken = self._delivered.get((conversation_id, cmd.elicit_id))
        if taken is None:
            session = self.manager.get(cmd.call_id)
            if session is not None and session.meta.get("conversation_id") != conversation_id:
                session = None  # another conversation's call
            result = session.answer_of(cmd.elicit_id) if session is not None else None
            if result is None:
                raise refused
            taken = (result.action, dict(cmd.content))  # the form's raw post is not on record
        if taken == (cmd.action, dict(cmd.content)):
            logger.info("a copy of the answer to %s: already taken", cmd.elicit_id)
            return
        raise CommandRefused(
            "ALREADY_ANSWERED",
            f"That question was already {_CLOSED_AS.get(taken[0], 'answered')}, so this answer "
            "was not used.",
        )

    async def _deliver(self, conv: LiveConversation, cmd: ElicitResponseCommand) -> None:
        pending = conv.pending.get(cmd.call_id)
        if pending is None:
            raise CommandRefused("NOT_WAITING", NOT_OPEN)
        if (pending.session_id, pending.elicit_id) != (cmd.session_id, cmd.elicit_id):
            raise CommandRefused("STALE_ELICIT", STALE_FORM)
        # Its form may be being drawn (a replayed call, a redraw after a refused answer).
        shown = await pending.wait_shown(SHOW_PATIENCE)
        if not shown or conv.pending.get(cmd.call_id) is not pending:
            raise CommandRefused("NOT_WAITING", NOT_OPEN)
        if not pending.deliver(FormPost(cmd.action, dict(cmd.content))):
            raise CommandRefused("NOT_WAITING", NOT_OPEN)
        self._delivered[conv.id, cmd.elicit_id] = (cmd.action, dict(cmd.content))
        self._delivered.move_to_end((conv.id, cmd.elicit_id))
        while len(self._delivered) > ANSWERS_REMEMBERED:
            self._delivered.popitem(last=False)
        await self.sink(
            conv.id,
            ElicitResponseAck(call_id=cmd.call_id, elicit_id=cmd.elicit_id, action=cmd.action),
        )

    async def abort(
        self, conversation_id: str, session_id: str, reason: str, *, routed: bool = False
    ) -> None:
        """Abort a tool session of this conversation, on whichever worker holds it.

        ``routed``: the command came from another worker; do not pass it on again. A call
        that has committed (a payment received) is not stopped: the refusal ``COMMITTED``
        says it is being finished, or that its question stays open; one stopped at its
        question to compensate ends on its card as usual.
        """
        conv = self._conversations.get(conversation_id)
        session = self.manager.get(session_id)
        if conv is not None and session_id in conv.calls and session is not None:
            decision = await session.abort(reason, by="user")
            if decision in ("finishing", "kept") and session.commitment is not None:
                raise CommandRefused(
                    "COMMITTED", abort_decision_text(decision, session.commitment.what)
                )
            return
        if not routed:
            owner = next(
                (
                    c.worker
                    for c in await self.store.resumable(conversation_id)
                    if c.call_id == session_id
                ),
                "",
            )
            command = Abort(type="abort", session_id=session_id, reason=reason)
            if await self.recovery.forward(owner, conversation_id, command):
                return
        raise CommandRefused("NOT_FOUND", f"No running tool {session_id!r} in this conversation.")

    async def decide(
        self,
        conversation_id: str,
        call_id: str,
        approved: bool,
        reason: str = "",
        *,
        routed: bool = False,
    ) -> None:
        """Approve or deny a tool call waiting for approval, on whichever worker asked.

        A decision that arrives while its call is being resumed by replay waits for the prompt
        to show again; a second copy of a decision already taken is taken quietly."""
        conv = self._conversations.get(conversation_id)
        approval = conv.approvals.get(call_id) if conv is not None else None
        if conv is not None and approval is None:
            if conv.starting is not None:  # maybe the turn resuming this call
                await conv.starting.wait()
            shown = conv.resuming.get(call_id)
            if shown is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(shown.wait(), SHOW_PATIENCE)
            approval = conv.approvals.get(call_id)
        if approval is not None and not approval.decision.done():
            approval.decision.set_result((approved, reason.strip()))
            self._decided[conversation_id, call_id] = approved
            while len(self._decided) > ANSWERS_REMEMBERED:
                self._decided.popitem(last=False)
            return
        decided = self._decided.get((conversation_id, call_id))
        if decided is not None:
            if decided == approved:
                logger.info("a copy of the decision on %s: already taken", call_id)
                return
            raise CommandRefused(
                "ALREADY_ANSWERED",
                f"That tool call was already {'approved' if decided else 'denied'}, so this "
                "was not used.",
            )
        if not routed and approval is None:
            holder = await self.leases.turn_holder(conversation_id)
            command: Approve | Deny = (
                Approve(type="approve", call_id=call_id)
                if approved
                else Deny(type="deny", call_id=call_id, reason=reason)
            )
            if await self.recovery.forward(holder, conversation_id, command):
                return
        raise CommandRefused("NOT_FOUND", f"Nothing is waiting for approval as {call_id!r}.")

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

    def _conversation(self, conversation_id: str) -> LiveConversation:
        conv = self._conversations.get(conversation_id)
        if conv is None:
            conv = self._conversations[conversation_id] = LiveConversation(conversation_id)
        return conv

    def forget_if_idle(self, conv: LiveConversation) -> None:
        """Drop the conversation's state once nothing runs or waits in it."""
        conv.calls = {c for c in conv.calls if self.manager.get(c) is not None}
        if conv.busy or conv.pending or conv.approvals or conv.resuming or conv.calls:
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
    ) -> None:
        """Take the conversation's lease and start a turn; BUSY if one runs anywhere. A turn
        for a ``new`` message is capped per visitor (``VisitorLimits``)."""
        if self._closed:
            raise CommandRefused("SHUTTING_DOWN", SHUTTING_DOWN)
        if conv.busy:
            raise CommandRefused(
                "BUSY", "Please wait for the current reply, or abort the running tool."
            )
        take = self.limits.take_new_turn if new and self.limits else self.leases.take_turn
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
            raise CommandRefused("BUSY", BUSY_ELSEWHERE)
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

    async def recover(self, conversation_id: str) -> bool:
        """A socket (re)connects: resume the conversation's suspended calls that no live worker
        holds (by replay), or have the live worker running its turn show it again."""
        if self._closed:
            return False  # shutting down: the next process resumes them
        conv = self._conversation(conversation_id)
        try:
            resumed = await self.recovery.recover(conv)
            if not resumed:  # messages queued before a restart (or on another worker)
                await self.next_queued(conv)
            return resumed
        finally:
            self.forget_if_idle(conv)

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
        """Enter ``phase``: on record (for the admin) and to every socket."""
        conv.phase = phase
        await self.store.save_phase(conv.id, phase)
        await self.sink(conv.id, self._state(conv))

    async def execute_tool_call(self, conversation_id: str, call: ToolCallRequest) -> str:
        """Run one tool call to its end; return the tool message for the model."""
        conv = self._conversation(conversation_id)
        try:
            return await self.runner.run(conv, call)
        finally:
            self.forget_if_idle(conv)
