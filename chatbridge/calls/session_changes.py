"""Changing an earlier answer of a running call (``chatbridge.author.exits``).

While the call waits on a question, the person (or an MCP client) may go back to an earlier
question of the same call and answer it again. The call's journal forks at that question: the
entries from it on are abandoned — marked so in the journal store, kept for operators, never
replayed — and the tool runs again from the start. The replay returns the answers before that
question without asking, then asks it anew; from there the call goes on live with the new
answer. Nothing the call did after that question is done twice, because a change that would
go back past a step (a ticket issued) or past the answer that committed the call (a payment)
is refused, saying which.

``SessionChanges`` is the session's collaborator for this (``chatbridge.calls.sessions``): it
owns the last change made and reads the call's journal; the session asks it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from chatbridge.author.approval import APPROVAL_KEY
from chatbridge.author.elicit import ElicitId, ElicitRequest
from chatbridge.author.exceptions import ChangeRefused, ElicitNotPending
from chatbridge.author.exits import NO_DECLARED_EXITS, Change, QuestionExits, default_change_label
from chatbridge.author.language import gettext as _
from chatbridge.author.tools import McpTool
from chatbridge.calls.commitment import CommitmentGuard
from chatbridge.calls.context import CallState
from chatbridge.calls.journal import Journal, JournalEntry
from chatbridge.calls.links import UrlLinks

if TYPE_CHECKING:
    from chatbridge.calls.sessions import PluginSession

__all__ = ["AnswerChanged", "SessionChanges"]

logger = logging.getLogger("chatbridge.sessions")


class AnswerChanged(BaseException):  # noqa: N818 - like CancelledError, not an error
    """Raised in the tool at its open question when an earlier answer is changed: the session
    runs the tool again from the start (a ``BaseException``: a tool's ``except Exception``
    does not swallow it)."""

    def __init__(self, change: Change, seq: int) -> None:
        super().__init__(change.elicit_id)
        self.change, self.seq = change, seq


class SessionChanges:
    """Changing an earlier answer (see the module docstring)."""

    __slots__ = ("_changed", "_guard", "_journal", "_links", "_session", "_state", "_tool")

    def __init__(
        self,
        session: PluginSession,
        tool: McpTool[Any, Any],
        journal: Journal,
        guard: CommitmentGuard,
        state: CallState,
        links: UrlLinks | None,
    ) -> None:
        self._session, self._tool, self._journal = session, tool, journal
        self._guard, self._state, self._links = guard, state, links
        self._changed: tuple[str, Change] | None = None  # the last change of an answer

    def asked(self) -> Iterator[tuple[str, JournalEntry]]:
        """The call's answered questions on record (the live branch), with their ids."""
        ordinal = 0
        for entry in self._journal.entries():
            if entry.kind != "elicit" or entry.scope != "":
                continue
            ordinal += 1
            number = self._journal.question_number(ordinal, entry.seq)
            yield str(ElicitId(self._tool.name, entry.key, self._session.call_id, number)), entry

    def offered(self, request: ElicitRequest) -> ElicitRequest:
        """``request`` with its exits and the earlier answers it may change, as shown."""
        declared = self._tool.exits.get(request.key, NO_DECLARED_EXITS)
        exits = QuestionExits(
            None,
            declared.decline.said() if declared.decline else None,
            declared.cancel.said() if declared.cancel else None,
        )
        labels = declared.change
        latest: dict[str, Change] = {}
        if not self._guard.committed:  # a payment taken: nothing before it changes
            # Nothing before the last step either: a step is never done twice.
            steps = [e.seq for e in self._journal.entries() if e.kind == "step"]
            barrier = max(steps, default=0)
            for elicit_id, entry in self.asked():
                if entry.seq < barrier or entry.key == APPROVAL_KEY:
                    continue
                if labels is not None and entry.key not in labels:
                    continue
                label = labels[entry.key] if labels else default_change_label(entry.key)
                latest.pop(entry.key, None)  # the key's latest answer, at its place in order
                latest[entry.key] = Change(elicit_id, entry.key, str(label))
        return dataclasses.replace(request, exits=exits, changes=tuple(latest.values()))

    async def forked(self, changed: AnswerChanged) -> None:
        """The tool unwound from a change: the journal forks here at the changed question (in
        its store it forked before the question closed: ``change``)."""
        abandoned = self._journal.fork(changed.seq)
        logger.info("call %s forked: %d entries abandoned", self._session.id, len(abandoned))
        self._state.elicit_seq = 0

    def changed_from(self, elicit_id: str) -> Change | None:
        """The earlier answer the question ``elicit_id`` was left for, if it was."""
        changed = self._changed
        return changed[1] if changed is not None and changed[0] == elicit_id else None

    async def change(self, elicit_id: str, target: str, *, by: str | None = None) -> Change:
        """From the open question ``elicit_id``, go back to the earlier question ``target``
        (its id, or its key: the latest answer to it) and ask it again (see the module
        docstring). What it went back to; ``ChangeRefused`` says why it cannot, and
        ``ElicitNotPending`` that ``elicit_id`` is not the open question."""
        session = self._session
        question = session.questions.open(elicit_id)
        request = question.request
        offered = request.changes
        chosen = next((c for c in offered if target in (c.elicit_id, c.key)), None)
        if chosen is None:
            raise ChangeRefused(session.id, target, self._why_not(target, offered))
        # A URL question's page may be reporting an answer (a payment) right now: the first
        # to close the link wins. The page won: its answer stands and the call goes on.
        if (
            request.mode == "url"
            and self._links is not None
            and (not await self._links.close(request) or not question.open)
        ):
            raise ElicitNotPending(session.id, elicit_id, None)
        seq = next(e.seq for i, e in self.asked() if i == chosen.elicit_id)
        # No answer reaches it from now on; the change is on record (the journal forked in
        # its store) before the question closes and anyone is told: a crash after that
        # finds the change made, never the question it left. A failed write stops the call
        # there, as any journal write that fails. Then the tool unwinds and runs again.
        logger.info("call %s: %s changes %s", session.id, by or "its user", chosen.elicit_id)
        question.closing()
        try:
            await session.durably(session.journal_store.fork(session, seq))
        except BaseException as exc:
            question.fail(exc)
            raise
        self._changed = (elicit_id, chosen)
        question.fail(AnswerChanged(chosen, seq))
        # The progress shown so far belongs to the abandoned branch: say what happens now.
        note = _("%(change)s: asked again") % {"change": chosen.label}
        await session.emit_progress(note, None, None)
        return chosen

    def _why_not(self, target: str, offered: tuple[Change, ...]) -> str:
        """Why ``target`` is not among the answers the open question offers to change."""
        found = [(i, e) for i, e in self.asked() if target in (i, e.key)]
        if not found:
            return _("This call has no earlier answer %(question)s to change.") % {
                "question": target
            }
        key = found[-1][1].key
        commitment = self._guard.commitment
        if commitment is not None:
            return _("%(question)s can no longer be changed: %(what)s was made after it.") % {
                "question": key.replace("_", " ").capitalize(),
                "what": commitment.what,
            }
        seq = found[-1][1].seq
        steps = [e.key for e in self._journal.entries() if e.kind == "step" and e.seq > seq]
        if steps:
            return _(
                "%(question)s can no longer be changed: %(step)s was done after it, and is "
                "not done twice."
            ) % {"question": key.replace("_", " ").capitalize(), "step": steps[0]}
        return _("This question does not offer to change %(question)s.") % {
            "question": key.replace("_", " ")
        }
