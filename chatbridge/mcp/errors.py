"""What an MCP client is told when a call fails: plain English, no internals.

A failure's full text (``"KeyError: 'seat'"``, journal errors naming call ids) is for the
server's log, where the session already put it with its traceback. The client gets a sentence
it can show a user. The one failure written for the caller is a bad set of arguments
(``InvalidToolParams``): its message says which field is wrong and how to call again.
"""

from __future__ import annotations

__all__ = ["UNEXPECTED", "public_error", "public_failure"]

UNEXPECTED = "The tool failed unexpectedly. The server logged the details for its operators."
_CALLERS_FAULT = "InvalidToolParams: "


def public_failure(error: str) -> str:
    """The client's text for a failed call whose ``FailedEvent.error`` is ``error``."""
    if error.startswith(_CALLERS_FAULT):
        return error.removeprefix(_CALLERS_FAULT)
    return UNEXPECTED


def public_error(exc: Exception) -> str:
    """The client's text for ``exc``, raised while starting or running a call."""
    return public_failure(f"{type(exc).__name__}: {exc}")
