"""Per-socket limits: a token bucket for the command rate, and the refusals of a command's
text (too long, or with a NUL character that no database stores alike), in words."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.utils.formats import number_format
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from chatbridge.calls.storable import nul_at
from chatbridge.chat.chat_errors import nul_refusal
from chatbridge.engine.protocol import MAX_USER_MESSAGE

__all__ = ["TokenBucket", "nul_refused", "too_long_refused"]


class TokenBucket:
    """``rate`` tokens a second, up to ``burst``; ``take()`` spends one if there is one."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic):
        if rate <= 0 or burst < 1:
            raise ValueError(f"rate must be positive and burst at least 1; got {rate}, {burst}")
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens, self._at = burst, clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


def too_long_refused(data: dict[str, Any]) -> str | None:
    """Why a user message is refused for its length (said plainly, never cut short)."""
    text = data.get("text")
    if data.get("type") not in ("user_message", "edit_message") or not isinstance(text, str):
        return None
    if len(text) <= MAX_USER_MESSAGE:
        return None
    return _(
        "Your message is %(length)s characters long; the limit is %(limit)s. "
        "Shorten it and send it again."
    ) % {
        "length": number_format(len(text), force_grouping=True),
        "limit": number_format(MAX_USER_MESSAGE, force_grouping=True),
    }


_TEXTS = {"text": gettext_noop("Your message"), "reason": gettext_noop("The reason")}


def nul_refused(data: dict[str, Any]) -> str | None:
    """Why a command with a NUL character is refused (no database stores it alike). An
    answer's content is left to its question, which refuses it on its form's field."""
    answer = data.get("type") == "elicit_response"
    where = nul_at({k: v for k, v in data.items() if not (answer and k == "content")})
    if where is None:
        return None
    return nul_refusal(_(_TEXTS.get(str(where[0]) if where else "", gettext_noop("This command"))))
