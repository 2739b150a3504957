"""Rules of an answer: business checks that travel with a key's model to every transport.

A key's model says what shape an answer has; its *rules* say which answers count (the card
must be on the table, the seat must be free). Rules read the question's context, which every
place an answer enters passes to pydantic (``model.model_validate(data, context=...)``), so the
chat, MCP push, MCP ``input_required`` and ``_respond`` refuse the same answers with the same
message and ask again::

    class PickedCard(BaseModel):
        card: str

        @answer_rule("card")
        def _dealt(cls, card: str, context: Mapping[str, Any]) -> None:
            if card not in {c["code"] for c in context["cards"]}:
                raise AnswerRefused("Pick one of the cards on the table.")

A rule runs only when there is a question (schema generation and a model used on its own skip
it), after the field's own validation. A rule that needs other fields takes a fourth argument,
``answer``: the fields declared (and validated) before its own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from pydantic import ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

__all__ = ["AnswerRefused", "RuleCheck", "answer_rule"]

RuleCheck = Callable[..., None]


class AnswerRefused(PydanticCustomError):
    """Raised by a rule (or any pydantic validator): refuse the answer with ``message`` as is.

    A plain ``ValueError`` reaches the user as "Value error, <message>"; this one does not.
    """

    def __new__(cls, message: str) -> AnswerRefused:
        # The message goes in as a context value, so braces in it are never a template.
        return super().__new__(cls, "answer_refused", "{message}", {"message": message})


def answer_rule(field: str, *fields: str) -> Callable[[RuleCheck], Any]:
    """Declare a rule for ``field`` (and ``fields``) of an answer model, checked with the
    question's context.

    The decorated function is called as ``check(cls, value, context)``, or
    ``check(cls, value, context, answer)`` if it takes four arguments (``answer``: the fields
    validated before this one), and refuses by raising ``AnswerRefused``.
    """

    def decorate(check: RuleCheck) -> Any:
        wants_answer = len(inspect.signature(check).parameters) >= 4

        def run(cls: Any, value: Any, info: ValidationInfo) -> Any:
            context = info.context
            if context is None:  # not a question: no rules
                return value
            if wants_answer:
                check(cls, value, context, info.data)
            else:
                check(cls, value, context)
            return value

        run.__name__ = run.__qualname__ = getattr(check, "__name__", "answer_rule")
        run.__doc__ = check.__doc__
        return field_validator(field, *fields, mode="after")(classmethod(run))

    return decorate
