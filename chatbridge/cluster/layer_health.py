"""Whether this process's channel layer (Redis) failed lately: what a missed ping or a silent
peer is read against. A ping the client did not answer while the layer was failing says
nothing of the client (its answer may be stuck between two workers); one missed while the
layer works says it is gone. Any part of the process that sees the layer fail notes it."""

from __future__ import annotations

import time

__all__ = ["note_trouble", "trouble_within"]

_trouble_at: float | None = None  # when this process last saw its channel layer fail


def note_trouble() -> None:
    """The channel layer just failed here (a send, a receive, the listener)."""
    global _trouble_at
    _trouble_at = time.monotonic()


def trouble_within(seconds: float) -> bool:
    """Did the channel layer fail here in the last ``seconds``?"""
    return _trouble_at is not None and time.monotonic() - _trouble_at < seconds
