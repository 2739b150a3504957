"""A person's controls over a conversation's work: stop the reply being written, abort a tool
call, approve or deny one, edit an earlier message or regenerate the last reply (the
conversation forks: ``chatbridge.records.forks``); and what a late answer (one for a question
no longer open) gets.

``HubControls`` is a part of ``ChatHub`` (``chatbridge.engine.engine``), kept apart so each
module stays about one thing; the hub owns the state these read and write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from chatbridge.calls.commitment import abort_decision_text
from chatbridge.calls.manager import SessionManager
from chatbridge.engine.conversation import (
    CommandRefused,
    ConversationStore,
    LiveConversation,
    Peers,
    TurnLeases,
)
from chatbridge.engine.protocol import Abort, Approve, Deny, ElicitResponseCommand, Stop
from chatbridge.engine.recovery import Recovery
from chatbridge.engine.turns import Turns

__all__ = ["ANSWERS_REMEMBERED", "SHOW_PATIENCE", "HubControls"]

logger = logging.getLogger("chatbridge.engine")

SHOW_PATIENCE = 10.0  # seconds an answer waits for its form to be drawn (a replay, a redraw)
ANSWERS_REMEMBERED = 2000  # answers delivered here: a second copy of one is taken quietly
_CLOSED_AS = {
    "decline": "declined",
    "cancel": "cancelled",
    "change": "left to change an earlier answer",
}


Fork = tuple[str, bool]  # where a conversation forks: a message's id, and whether it is edited


class HubControls:
    """Stop, abort, approve and deny (see the module docstring)."""

    # The hub's state (``ChatHub.__init__`` sets it).
    manager: SessionManager
    store: ConversationStore
    peers: Peers | None
    leases: TurnLeases
    recovery: Recovery
    turns: Turns
    _conversations: dict[str, LiveConversation]
    _decided: OrderedDict[tuple[str, str], bool]

    _delivered: OrderedDict[tuple[str, str], tuple[str, dict[str, Any]]]

    if TYPE_CHECKING:  # the hub's own, used here

        def _held(
            self, conversation_id: str
        ) -> contextlib.AbstractContextManager[LiveConversation]: ...

        def forget_if_idle(self, conv: LiveConversation) -> None: ...

        async def _begin(
            self,
            conv: LiveConversation,
            lost: list[ElicitResponseCommand],
            text: str | None = None,
            *,
            new: bool = False,
            fork: Fork | None = None,
            address: str = "",
        ) -> None: ...

    async def edit_message(
        self, conversation_id: str, message_id: str, text: str, *, address: str = ""
    ) -> None:
        """Send the user's earlier message ``message_id`` again as ``text``: the conversation
        forks there (what followed is kept as an earlier version) and a turn starts (capped
        per visitor and per the sender's ``address``, as a new message's)."""
        await self._forked(conversation_id, text, (message_id, True), address)

    async def regenerate(self, conversation_id: str, message_id: str, *, address: str = "") -> None:
        """Write the last reply, ``message_id``, again (it is kept as an earlier version)."""
        await self._forked(conversation_id, None, (message_id, False), address)

    async def _forked(
        self, conversation_id: str, text: str | None, fork: Fork, address: str
    ) -> None:
        with self._held(conversation_id) as conv:
            while conv.starting is not None and not conv.running:
                await conv.starting.wait()
            await self._begin(conv, lost=[], text=text, new=True, fork=fork, address=address)

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
        if taken == cmd.given():
            logger.info("a copy of the answer to %s: already taken", cmd.elicit_id)
            return
        raise CommandRefused(
            "ALREADY_ANSWERED",
            f"That question was already {_CLOSED_AS.get(taken[0], 'answered')}, so this answer "
            "was not used.",
        )
