"""What a person reads in the chat for a refused or failed command, in their language (the
technical text is logged, and stays in the event for programs)."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

__all__ = ["chat_error_text", "nul_refusal"]

_CHAT_ERRORS = {
    "BAD_JSON": gettext_noop(
        "That could not be sent: the page sent something the server could not read. "
        "Reload the page and try again."
    ),
    "BAD_COMMAND": gettext_noop(
        "That could not be sent: the page sent something the server did not "
        "expect. Reload the page and try again."
    ),
    "NOT_FOUND": gettext_noop("That is no longer open: it may have finished already."),
    "NOT_WAITING": gettext_noop("This question is no longer waiting for an answer."),
    "STALE_ELICIT": gettext_noop("This form is out of date. Answer the question shown now."),
    "REFUSED": gettext_noop("That could not be done. Please try again."),
    "INTERNAL_ERROR": gettext_noop("Something went wrong on the server. Please try again."),
    "LLM_ERROR": gettext_noop(
        "The assistant could not reply just now. Please try again in a moment."
    ),
}


def nul_refusal(what: str) -> str:
    """Why a text (``what``: "Your message", "The reason") with a NUL character is refused."""
    return _(
        "%(what)s has a NUL character (U+0000), which cannot be saved. Remove it and send it again."
    ) % {"what": what}


def chat_error_text(code: str, message: str) -> str:
    """What a person reads for a refused or failed command (the technical ``message`` is
    logged, and stays in the event for programs)."""
    words = _CHAT_ERRORS.get(code)
    return _(words) if words is not None else message
