"""A URL page's answer: on record first, then handed to the call wherever it runs.

``complete`` is what a plugin's page calls through ``UrlQuestion.complete``: the answer is
validated and the link marked used on record (``chatbridge.records.url_links.record_answer``),
then ``Accept(content)`` goes to the call on the worker holding its lease, never to a copy that
lost it. A call that no live worker holds (the server restarting), or a holder the message does
not reach, finds the answer on record when it is resumed or looks again
(``chatbridge.cluster.record_watch``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from chatbridge.author.elicit import ElicitResult, result_to_dict
from chatbridge.author.exceptions import ElicitNotPending
from chatbridge.calls.manager import SessionManager
from chatbridge.cluster.peers import deliver_page_answer
from chatbridge.records.lease import WORKER_ID
from chatbridge.records.models import ElicitLink
from chatbridge.records.url_links import record_answer

__all__ = ["complete", "deliver"]


async def complete(
    row: ElicitLink, manager: SessionManager, content: BaseModel | Mapping[str, Any]
) -> None:
    """A page is done with the link ``row``: the answer on record, then delivered to the call
    (held by ``manager`` or by another worker)."""
    answer, held_by = await record_answer(row, content)
    await deliver(manager, row.call_id, row.elicit_id, answer, holder=held_by)


async def deliver(
    manager: SessionManager,
    call_id: str,
    elicit_id: str,
    answer: ElicitResult[Any],
    *,
    holder: str | None,
) -> bool:
    """Hand a page's answer to the call here (``manager``'s) or on the worker ``holder``
    (the call's lease, read as the answer was recorded: ``None`` for a call with no row);
    False if that worker does not have it now (it finds the answer on record when it asks
    again)."""
    if holder is None or holder == WORKER_ID:  # no row: a call kept in memory, only here
        session = manager.get(call_id)
        if session is not None:
            with contextlib.suppress(ElicitNotPending):
                await session.respond_to_elicit(elicit_id, answer, by_page=True)
                return True
        return False
    if not holder:
        return False
    return await deliver_page_answer(call_id, elicit_id, result_to_dict(answer), worker=holder)
