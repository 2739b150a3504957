"""One open question of a tool call: what was asked, the answers refused (with their errors),
what a host last showed for it, and the answer.

A ``Question`` is made by its ``PluginSession`` when the tool calls ``ctx.elicit`` and is the
only place any of this is kept: the chat's form, a legacy MCP push, a 2026-07-28 round, a Task
and a URL question's page all hand answers to it (through the session), and it validates each
one once, against the key's model with the question's context. An answer it has validated is
not validated again when it comes back (the chat's form checks a post before its handler
returns it).

It also owns the one attempts policy of every transport: a question takes ``limit`` refused
answers (``CHATBRIDGE_MAX_REFUSED_ANSWERS``, by way of the ``SessionManager``); the refusal that
reaches it closes the question by itself, no host deciding: the tool gets
``TooManyRefusedAnswers`` where it asked (the call fails, a committed one compensates), and so
does whoever handed in that answer, instead of the usual ``ElicitValidationError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from chatbridge.author.elicit import (
    ElicitRequest,
    ElicitResult,
    result_from_dict,
    result_to_dict,
    validate_result,
)
from chatbridge.author.exceptions import ElicitValidationError, TooManyRefusedAnswers

__all__ = ["MAX_REFUSED_ANSWERS", "FieldErrors", "Question", "Refusal"]

# Refused answers a question takes before it closes, when nothing else is configured: enough
# for a person to read the errors and fix a typo or two, few enough that a client sending the
# same bad answer again and again is stopped within seconds (``CHATBRIDGE_MAX_REFUSED_ANSWERS``).
MAX_REFUSED_ANSWERS = 5

FieldErrors = dict[str, list[str]]
_NO_ERRORS: Mapping[str, list[str]] = MappingProxyType({})


@dataclass(frozen=True)
class Refusal:
    """An answer the question refused: the content as it came, and why (in field errors)."""

    data: dict[str, Any]
    errors: FieldErrors


class Question:
    """An open question (see the module docstring); ``attempts`` starts from the refusals on
    record when a resumed call asks it again; ``limit``: the refused answers it takes (None or
    0: as many as it gets)."""

    __slots__ = (  # one per open question: no dict
        "_checked",
        "_closing",
        "_future",
        "answer",
        "attempts",
        "by_page",
        "error",
        "errors",
        "limit",
        "refusals",
        "refused_too_often",
        "request",
        "shown",
    )

    def __init__(
        self, request: ElicitRequest, *, attempts: int = 0, limit: int | None = None
    ) -> None:
        self.request = request
        self.attempts = attempts  # refused answers, counted here and nowhere else
        self.limit = limit
        # Why it closed, when its answers were refused as often as it takes.
        self.refused_too_often: TooManyRefusedAnswers | None = None
        self.refusals: tuple[Refusal, ...] = ()  # most questions see none: no list each
        self.error: ElicitValidationError | None = None  # the last refusal by the model
        # The last refusal's field errors, whoever refused it (none yet: one shared empty map).
        self.errors: Mapping[str, list[str]] = _NO_ERRORS
        # What a host last showed for it: the chat's form (``ElicitForm``, read back by type),
        # a 2026-07-28 round's ``input_required`` or a task's request (each host only asks
        # whether it was handed out). ``object``: no host reads another's as its own.
        self.shown: object | None = None
        self.answer: ElicitResult[Any] | None = None
        self.by_page = False  # answered on its URL page: the page's link is spent already
        self._future: asyncio.Future[ElicitResult[Any]] = asyncio.get_running_loop().create_future()
        self._checked: object = None  # the content this question validated last
        self._closing = False  # taking no answer: it is being left (a change on its way)

    @property
    def id(self) -> str:
        return str(self.request.id)

    @property
    def open(self) -> bool:
        """Not answered, expired, failed or refused too often yet, and not being left."""
        return not self._future.done() and not self._closing

    def closing(self) -> None:
        """Take no answer from now on: the question is being left (an earlier answer is
        changed, and the change is being put on record); ``fail`` closes it then."""
        self._closing = True

    @property
    def ended(self) -> bool:
        """Closed by an answer, an expiry, an abort or its refused answers (not cancelled:
        parked)."""
        return self._future.done() and not self._future.cancelled()

    def check(self, result: ElicitResult[Any] | Mapping[str, Any]) -> ElicitResult[Any]:
        """``result`` validated for this question (a JSON form is parsed first); a refused
        answer is counted and kept before ``ElicitValidationError`` is raised, or
        ``TooManyRefusedAnswers`` when it was the last one the question takes."""
        model = self.request.schema.model
        if isinstance(result, Mapping):
            raw = result
            try:
                result = result_from_dict(raw)
            except ValueError as exc:
                error = ElicitValidationError(
                    self.id, model.__name__, [{"loc": ("action",), "msg": str(exc)}]
                )
                content = raw.get("content")
                data = dict(content) if isinstance(content, Mapping) else {}
                self.refuse(data, error.field_errors(), error)
                if self.refused_too_often is not None:
                    raise self.refused_too_often from error
                raise error from None
        if result.accepted and result.content is self._checked:
            return result  # validated here already (a form's post, returned by its handler)
        try:
            validated = validate_result(result, model, self.id, context=self.request.context)
        except ElicitValidationError as exc:
            self.refuse(result_to_dict(result).get("content") or {}, exc.field_errors(), exc)
            if self.refused_too_often is not None:
                raise self.refused_too_often from exc
            raise
        if validated.accepted:
            self._checked = validated.content
        return validated

    def refuse(
        self, data: dict[str, Any], errors: FieldErrors, error: ElicitValidationError | None = None
    ) -> Refusal:
        """Count a refused answer (by the model, or by a form's own checks before it); the one
        that reaches ``limit`` closes the question (``refused_too_often`` says why)."""
        refusal = Refusal(dict(data), errors)
        self.attempts += 1
        self.refusals += (refusal,)
        self.errors = errors
        if error is not None:
            self.error = error
        if self.limit and self.attempts >= self.limit and self.open:
            closed = TooManyRefusedAnswers(self.id, self.request.key, self.attempts, errors)
            self.refused_too_often = closed
            self._future.set_exception(closed)  # raised in the tool where it asked
        return refusal

    def settle(self, result: ElicitResult[Any]) -> None:
        """Close the question with ``result`` (already checked): the tool resumes with it."""
        self.answer = result
        self._future.set_result(result)

    def fail(self, exc: BaseException) -> None:
        """Close the question with ``exc`` raised in the tool (an abort, a change)."""
        if not self._future.done():
            self._future.set_exception(exc)

    def wait(self) -> asyncio.Future[ElicitResult[Any]]:
        """Await it for the answer, once there is one (what ``ctx.elicit`` returns). The
        future itself, not a coroutine awaiting it: a waiting call keeps one frame less."""
        return self._future

    async def closed(self) -> None:
        """Wait until the question is no longer open (answered, expired, failed)."""
        await asyncio.wait({self._future})

    def __repr__(self) -> str:
        state = "open" if self.open else "closed"
        return f"<Question {self.id} {state}, {self.attempts} refused>"
