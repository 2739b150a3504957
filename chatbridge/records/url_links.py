"""The links of URL questions, kept in the database (``UrlLinks`` for the runtime).

A link is ``<origin>/elicit/<token>/``: one question's (bound to its call and elicitation id),
one time (a page that answered, or a question closed otherwise, ends it), expiring
(``CHATBRIDGE_URL_LINK_TTL`` seconds; the owner of the chat that asked gets a fresh link on a
visit to an expired one while the question is open). The row keeps a hash of the token, never
the token: the token is an HMAC of the question and a nonce under the secret key, so asking the
same question again (a replay, a restart) hands out the same link until it expires.

``record_answer`` is the record's part of what a plugin's page calls through
``UrlQuestion.complete`` (``chatbridge.cluster.page_answers``): it validates the answer with the
key's model, marks the link used (compare-and-set, so two tabs cannot both pay) and reads which
worker holds the call's lease (``chatbridge.records.lease``), in one transaction.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import salted_hmac
from pydantic import BaseModel

from chatbridge.author.elicit import (
    Accept,
    ElicitRequest,
    ElicitResult,
    result_from_dict,
    result_to_dict,
    validate_result,
)
from chatbridge.author.exceptions import LinkUnusable
from chatbridge.calls.links import OpenedLink
from chatbridge.conf import setting
from chatbridge.installed_plugins import get_registry
from chatbridge.records.lease import holder
from chatbridge.records.models import ElicitLink, ToolSession
from chatbridge.records.outage import db_call

__all__ = [
    "DjangoUrlLinks",
    "answered",
    "find",
    "record_answer",
    "renew",
    "token_hash",
]

logger = logging.getLogger("chatbridge.links")

_SALT = "chatbridge.records.url_links"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _token(elicit_id: str, nonce: str) -> str:
    digest = salted_hmac(_SALT, f"{elicit_id}|{nonce}", algorithm="sha256").digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _base(meta: Mapping[str, str]) -> str:
    """Where links point: ``CHATBRIDGE_PUBLIC_URL``, else the origin the call was asked from
    (its chat page's or its MCP request's, in the call's meta)."""
    origin = str(setting("CHATBRIDGE_PUBLIC_URL") or "") or meta.get("origin", "")
    return origin.rstrip("/")


def _ttl() -> timedelta:
    return timedelta(seconds=float(setting("CHATBRIDGE_URL_LINK_TTL")))


def _open(request: ElicitRequest) -> tuple[str, dict[str, Any] | None]:
    """The question's token (the same while its link lives; a fresh one once it expired) and
    what its page reported already."""
    elicit_id, now = str(request.id), timezone.now()
    with transaction.atomic():
        row = ElicitLink.objects.select_for_update().filter(elicit_id=elicit_id).first()
        stale = row is not None and (row.expires_at <= now or row.closed_at is not None)
        if row is not None and row.result is None and stale:  # asked again: a new link
            row.nonce = secrets.token_hex(16)
            row.token_hash = token_hash(_token(elicit_id, row.nonce))
            row.expires_at, row.closed_at, row.opened_at = now + _ttl(), None, None
            row.save(update_fields=["nonce", "token_hash", "expires_at", "closed_at", "opened_at"])
        if row is None:
            nonce = secrets.token_hex(16)
            row = ElicitLink.objects.create(
                elicit_id=elicit_id,
                call_id=request.call_id,
                tool_name=request.tool_name,
                key=request.key,
                nonce=nonce,
                token_hash=token_hash(_token(elicit_id, nonce)),
                message=request.message,
                context=request.context,
                params=request.params,
                expires_at=now + _ttl(),
            )
    return _token(elicit_id, row.nonce), row.result


def _answer(elicit_id: str) -> dict[str, Any] | None:
    """What the question's page reported, or the Cancel its expired link left."""
    row = ElicitLink.objects.filter(elicit_id=elicit_id, result__isnull=False).first()
    return row.result if row is not None else None


def answered(elicit_ids: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The answers their pages reported (on record) of the questions ``elicit_ids``: (elicit
    id, the answer), for a holder reading what no message brought it."""
    rows = ElicitLink.objects.filter(elicit_id__in=elicit_ids, completed_at__isnull=False)
    return [(str(e), dict(r)) for e, r in rows.values_list("elicit_id", "result") if r]


def _close(elicit_id: str) -> bool:
    """Close the link; False if its page (or its expiry) had ended the question first. The
    page's compare-and-set needs ``closed_at`` unset, so after this update no page can
    answer: the two single-statement updates decide who ended the question."""
    ElicitLink.objects.filter(elicit_id=elicit_id, closed_at=None).update(closed_at=timezone.now())
    return not ElicitLink.objects.filter(elicit_id=elicit_id, result__isnull=False).exists()


class DjangoUrlLinks:
    """``UrlLinks`` in the database (see the module docstring)."""

    async def open(self, request: ElicitRequest, meta: Mapping[str, str]) -> OpenedLink:
        try:
            token, answer = await db_call(_open, request)
        except IntegrityError:  # two workers opened the same question at once: take theirs
            token, answer = await db_call(_open, request)
        url = _base(meta) + reverse("chatbridge:elicit_link", args=[token])
        return OpenedLink(url, result_from_dict(answer) if answer is not None else None)

    # Not on the process's database thread: an abort asks these while an operator's request
    # may hold that thread waiting for the abort's reply (the admin on SQLite).
    async def answer(self, request: ElicitRequest) -> ElicitResult[Any] | None:
        data = await db_call(_answer, str(request.id), thread_sensitive=False)
        return result_from_dict(data) if data is not None else None

    async def close(self, request: ElicitRequest) -> bool:
        return await db_call(_close, str(request.id), thread_sensitive=False)


def find(token: str, *, visit: bool = False) -> ElicitLink:
    """The live link of ``token``, or ``LinkUnusable`` saying why not. ``visit`` notes the
    first visit, in one transaction with the read."""
    if visit:
        with transaction.atomic():
            return _find(token, visit=True)
    return _find(token, visit=False)


def _find(token: str, *, visit: bool) -> ElicitLink:
    row = ElicitLink.objects.filter(token_hash=token_hash(token)).first()
    if row is None:
        raise LinkUnusable("unknown")
    if row.expires_at <= timezone.now():
        raise LinkUnusable("expired")
    if row.completed_at is not None:
        raise LinkUnusable("used")
    if row.closed_at is not None:
        raise LinkUnusable("closed")
    if visit and row.opened_at is None:
        ElicitLink.objects.filter(pk=row.pk, opened_at=None).update(opened_at=timezone.now())
    return row


def _mark_completed(row: ElicitLink, result: dict[str, Any], commits: bool) -> str | None:
    """Compare-and-set: exactly one caller completes a live link. An answer that commits its
    call (``.commits()``) marks the call committed in the same transaction: from then on no
    abort ends it silently, on whichever worker it runs or is resumed. The worker holding the
    call, read in the same transaction (``lease.holder``)."""
    with transaction.atomic():
        done = ElicitLink.objects.filter(
            pk=row.pk, completed_at=None, closed_at=None, expires_at__gt=timezone.now()
        ).update(completed_at=timezone.now(), result=result)
        if not done:
            raise LinkUnusable(_why_not(row.pk))
        if commits:
            ToolSession.objects.filter(pk=row.call_id).update(committed=row.key)
        return holder(row.call_id)


def _why_not(pk: int) -> str:
    """Why the link ``pk``, found live, could not be completed after all."""
    now = ElicitLink.objects.filter(pk=pk).values("completed_at", "closed_at", "expires_at")
    state = now.first()
    if state is None or state["completed_at"] is not None:
        return "used"
    return "closed" if state["closed_at"] is not None else "expired"


async def record_answer(
    row: ElicitLink, content: BaseModel | Mapping[str, Any]
) -> tuple[ElicitResult[Any], str | None]:
    """A page is done with the link ``row`` (``find`` found it live when the page's request
    came): validate ``Accept(content)``, mark the link used, and say which worker holds the
    call (``deliver`` in ``chatbridge.cluster.page_answers`` wakes it)."""
    plugin = get_registry().get(row.tool_name)
    model = plugin.tool.elicits.get(row.key) if plugin is not None else None
    if model is None:
        raise LinkUnusable("unknown")
    answer = validate_result(
        Accept(dict(content) if isinstance(content, Mapping) else content),
        model,
        row.elicit_id,
        context=row.context,
    )
    commits = row.key in plugin.tool.commitments if plugin is not None else False
    held_by = await sync_to_async(_mark_completed)(row, result_to_dict(answer), commits)
    return answer, held_by


def _renew(token: str, owner: str) -> str | None:
    """A fresh token for ``token``'s expired link, if its question is still open and was
    asked in a chat of ``owner``; None otherwise."""
    with transaction.atomic():
        row = ElicitLink.objects.select_for_update().filter(token_hash=token_hash(token)).first()
        if row is None or row.result is not None or row.closed_at is not None:
            return None
        if row.expires_at > timezone.now():  # renewed meanwhile (another tab): theirs is live
            return None
        asked_in = ToolSession.objects.filter(pk=row.call_id, conversation__owner=owner)
        if not asked_in.exists():
            return None
        row.nonce = secrets.token_hex(16)
        row.token_hash = token_hash(_token(row.elicit_id, row.nonce))
        row.expires_at, row.opened_at = timezone.now() + _ttl(), None
        row.save(update_fields=["nonce", "token_hash", "expires_at", "opened_at"])
    return _token(row.elicit_id, row.nonce)


async def renew(token: str, owner: str | None) -> str | None:
    """A visit found ``token``'s link expired. The question stays open (it ends on its own
    timeout: a booking is not cancelled because a link aged); the owner of the chat it was
    asked in gets a fresh link to it (None for anyone else: what expiry protects is a link
    that leaked)."""
    if owner is None:
        return None
    return await sync_to_async(_renew)(token, owner)
