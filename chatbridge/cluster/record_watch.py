"""What is on record for the calls held here, read again (DESIGN §11: messages only wake).

A URL question's page may report its answer on any worker: that worker commits the answer,
then wakes the holder through the channel layer. A wake-up can be lost (Redis down or
restarted, a message expired, the holder's listener rejoining): the holder then reads what is
on record itself, every ``CHATBRIDGE_RECHECK_SECONDS`` while it has such a question open and
whenever its worker listener (re)joins its groups, so a lost message delays an answer and never
loses it. One query a pass for all of this worker's open URL questions; none while it has none.
"""

from __future__ import annotations

import asyncio
import logging

from chatbridge.author.elicit import result_from_dict
from chatbridge.author.exceptions import ElicitNotPending, ElicitValidationError
from chatbridge.calls.manager import SessionManager
from chatbridge.calls.sessions import PluginSession
from chatbridge.records.outage import db_call
from chatbridge.records.periodic import Periodic
from chatbridge.records.url_links import answered

__all__ = ["RecordWatch"]

logger = logging.getLogger("chatbridge.links")


class RecordWatch(Periodic):
    """Reads the answers on record of this worker's open URL questions, every ``every``
    seconds and when ``kick``ed (see the module docstring)."""

    def __init__(self, manager: SessionManager, every: float) -> None:
        what = "reading the answers on record of open URL questions"
        super().__init__("chatbridge-record-watch", self.recheck, every=every, what=what)
        self.manager = manager
        self._kicked: asyncio.Task[list[str]] | None = None

    def kick(self) -> None:
        """Read again now (the listener rejoined: what it missed meanwhile is on record)."""
        if self._kicked is None or self._kicked.done():
            self._kicked = asyncio.get_running_loop().create_task(
                self.recheck(), name="chatbridge-record-watch-kick"
            )

    async def aclose(self) -> None:
        kicked, self._kicked = self._kicked, None
        if kicked is not None:
            kicked.cancel()
        await super().aclose()

    async def recheck(self) -> list[str]:
        """Hand each open URL question here the answer its page left on record; their ids."""
        waiting: dict[str, PluginSession] = {}
        for session in self.manager.sessions():
            question = session.question
            if question is not None and question.open and question.request.mode == "url":
                waiting[question.id] = session
        if not waiting:
            return []
        delivered = []
        for elicit_id, data in await db_call(answered, list(waiting)):
            session = waiting[elicit_id]
            try:
                await session.respond_to_elicit(elicit_id, result_from_dict(data), by_page=True)
            except (ElicitNotPending, ElicitValidationError):
                continue  # closed meanwhile (its message came after all), or not for it
            logger.info("%s: its page's answer, found on record, handed to its call", elicit_id)
            delivered.append(elicit_id)
        return delivered
