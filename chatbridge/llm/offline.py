"""The offline model itself: a reply planned from the conversation and the tools offered, the
pieces it streams in and the tokens it counts. No litellm here: a server configured with the
offline model answers without importing it (seconds of a worker's start, the first reply's
wait); ``chatbridge.llm.offline_provider`` serves the same model to litellm as ``offline/...``."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from chatbridge.llm.planner import Reply, plan_reply

__all__ = [
    "OFFLINE_PROVIDER",
    "is_offline",
    "pieces",
    "reply",
    "stream_pause",
    "text_deltas",
    "usage",
]

OFFLINE_PROVIDER = "offline"
_WORDS_PER_CHUNK = 3


def is_offline(model: str | None) -> bool:
    """Is ``model`` the offline model (``offline/<anything>``)?"""
    return bool(model) and str(model).startswith(f"{OFFLINE_PROVIDER}/")


def reply(
    messages: Sequence[Any],
    tools: Sequence[Mapping[str, Any]] | None = None,
    max_tokens: int | None = None,
) -> Reply:
    """What the offline model answers to ``messages`` with ``tools`` offered."""
    plain = [m if isinstance(m, dict) else dict(m) for m in messages]
    return plan_reply(plain, list(tools) if tools else None, max_tokens)


def usage(messages: Sequence[Any], answer: Reply) -> dict[str, int]:
    """The tokens it counts: words in, words (and argument words) out."""
    prompt = sum(len(str(m.get("content") or "").split()) for m in messages if isinstance(m, dict))
    completion = len(answer.text.split()) + sum(
        len(json.dumps(c.arguments).split()) + 1 for c in answer.tool_calls
    )
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def pieces(text: str) -> list[str]:
    """``text`` as it streams: three words a piece."""
    words = text.split(" ")
    return [
        " ".join(words[i : i + _WORDS_PER_CHUNK])
        + (" " if i + _WORDS_PER_CHUNK < len(words) else "")
        for i in range(0, len(words), _WORDS_PER_CHUNK)
    ]


def stream_pause() -> float:
    """Seconds between text pieces (``CHATBRIDGE_OFFLINE_STREAM_DELAY``, default none): to
    watch (and stop) a reply being written."""
    return float(os.environ.get("CHATBRIDGE_OFFLINE_STREAM_DELAY") or 0)


async def text_deltas(answer: Reply) -> AsyncIterator[str]:
    """``answer``'s text, piece by piece, paused as ``stream_pause`` says."""
    pause = stream_pause()
    for piece in pieces(answer.text) if answer.text else ():
        if pause > 0:
            await asyncio.sleep(pause)
        yield piece
