"""The chat socket's limits: the size of a frame (and daphne made to say so with a close
frame), a token bucket for the command rate, and the refusals of a command's text (too long,
or with a NUL character that no database stores alike), in words."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.utils.formats import number_format
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from chatbridge.author.storable import nul_at
from chatbridge.chat.chat_errors import nul_refusal
from chatbridge.engine.protocol import MAX_USER_MESSAGE

__all__ = [
    "MAX_MESSAGE_BYTES",
    "TokenBucket",
    "close_oversized_frames_on_daphne",
    "nul_refused",
    "take_each",
    "too_long_refused",
]

# The largest frame a chat socket takes. The commands of ``make run`` and docs/production.md
# give the servers this limit, so they refuse a bigger frame before reading it (close 1009,
# with a reason); the consumer checks it too, for a server started without it.
MAX_MESSAGE_BYTES = 64 * 1024


class TokenBucket:
    """``rate`` tokens a second, up to ``burst``; ``take()`` spends one if there is one."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic):
        if rate <= 0 or burst < 1:
            raise ValueError(f"rate must be positive and burst at least 1; got {rate}, {burst}")
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens, self._at = burst, clock()

    def _refill(self) -> float:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return self._tokens

    def take(self) -> bool:
        if self._refill() >= 1:
            self._tokens -= 1
            return True
        return False

    @property
    def full(self) -> bool:
        """Whether it holds its whole burst (forgetting it then forgets nothing)."""
        return self._refill() >= self.burst


def take_each(buckets: Iterable[TokenBucket]) -> bool:
    """Spend a token of each of ``buckets``, only if each has one."""
    held = list(buckets)
    if all(bucket._refill() >= 1 for bucket in held):
        for bucket in held:
            bucket._tokens -= 1
        return True
    return False


def close_oversized_frames_on_daphne() -> None:
    """Under daphne, refuse a frame over its ``--websocket-max-message-size`` with a close
    frame (1009 and autobahn's reason) rather than by dropping the TCP connection, which is
    what autobahn's ``failByDrop`` (on by default; daphne has no option for it) does to every
    connection it fails: the browser then saw 1006 and no reason, as if the network had gone.
    Nothing when this process is not a daphne server."""
    daphne_server: Any = sys.modules.get("daphne.server")  # daphne is untyped
    if daphne_server is None or getattr(daphne_server.WebSocketFactory, "closes_cleanly", False):
        return
    base: Any = daphne_server.WebSocketFactory

    class ClosingWebSocketFactory(base):  # type: ignore[misc]
        """daphne's factory, failing connections with a closing handshake."""

        closes_cleanly = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.setProtocolOptions(failByDrop=False)

    daphne_server.WebSocketFactory = ClosingWebSocketFactory


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
