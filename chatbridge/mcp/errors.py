"""What an MCP client is told when a call fails: plain English, no internals.

A failure's full text (``"KeyError: 'seat'"``, journal errors naming call ids) is for the
server's log, where the session already put it with its traceback. The client gets a sentence
it can show a user. The one failure written for the caller is a bad set of arguments
(``InvalidToolParams``): its message says which field is wrong and how to call again.
"""

from __future__ import annotations

from chatbridge.author.exceptions import InvalidToolParams

__all__ = ["UNEXPECTED", "public_error", "public_failure"]

UNEXPECTED = "The tool failed unexpectedly. The server logged the details for its operators."
# The one failure written for its caller, by its type (``Failed.error_type``, or the exception).
_CALLERS_FAULT = InvalidToolParams.__name__


def public_failure(error_type: str, message: str) -> str:
    """The client's text for a call that failed with ``error_type`` and ``message``."""
    return message if error_type == _CALLERS_FAULT else UNEXPECTED


def public_error(exc: Exception) -> str:
    """The client's text for ``exc``, raised while starting or running a call."""
    return str(exc) if isinstance(exc, InvalidToolParams) else UNEXPECTED
