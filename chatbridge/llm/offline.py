"""The offline model as a litellm custom provider: ``model="offline/<anything>"``."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import GenericStreamingChunk, ModelResponse

from chatbridge.llm.planner import Reply, plan_reply

__all__ = ["OfflineLLM"]

_WORDS_PER_CHUNK = 3


def _reply(messages: list[Any], optional_params: dict[str, Any]) -> Reply:
    plain = [m if isinstance(m, dict) else dict(m) for m in messages]
    return plan_reply(plain, optional_params.get("tools"), optional_params.get("max_tokens"))


def _usage(messages: list[Any], reply: Reply) -> dict[str, int]:
    prompt = sum(len(str(m.get("content") or "").split()) for m in messages if isinstance(m, dict))
    completion = len(reply.text.split()) + sum(
        len(json.dumps(c.arguments).split()) + 1 for c in reply.tool_calls
    )
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _text_pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [
        " ".join(words[i : i + _WORDS_PER_CHUNK])
        + (" " if i + _WORDS_PER_CHUNK < len(words) else "")
        for i in range(0, len(words), _WORDS_PER_CHUNK)
    ]


def _chunks(messages: list[Any], reply: Reply) -> Iterator[GenericStreamingChunk]:
    pieces = _text_pieces(reply.text) if reply.text else []
    for piece in pieces:
        yield GenericStreamingChunk(
            text=piece, is_finished=False, finish_reason="", usage=None, index=0, tool_use=None
        )
    for index, call in enumerate(reply.tool_calls):
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        cut = max(1, len(arguments) // 2)
        for i, fragment in enumerate((arguments[:cut], arguments[cut:])):
            yield GenericStreamingChunk(
                text="",
                is_finished=False,
                finish_reason="",
                usage=None,
                index=0,
                tool_use={
                    "id": call.id if i == 0 else None,
                    "type": "function",
                    "index": index,
                    "function": {"name": call.name if i == 0 else None, "arguments": fragment},
                },
            )
    yield GenericStreamingChunk(
        text="",
        is_finished=True,
        finish_reason="tool_calls" if reply.tool_calls else "stop",
        usage={**_usage(messages, reply)},  # type: ignore[typeddict-item]
        index=0,
        tool_use=None,
    )


class OfflineLLM(CustomLLM):
    """Answers from ``plan_reply``: no network, no key, same answer for the same input."""

    def completion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        messages: list[Any] = kwargs["messages"]
        reply = _reply(messages, kwargs.get("optional_params") or {})
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in reply.tool_calls
            ]
        return ModelResponse(
            model=kwargs.get("model"),
            created=int(time.time()),
            choices=[
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            usage=_usage(messages, reply),
        )

    # Deliberately not ``async``: litellm creates this coroutine in a worker thread and awaits
    # it later; a cancellation in between (an aborted session) would leave it never awaited.
    # litellm accepts a ready ModelResponse here, and the offline answer is instant.
    def acompletion(self, *args: Any, **kwargs: Any) -> ModelResponse:  # type: ignore[override]
        return self.completion(*args, **kwargs)

    def streaming(self, *args: Any, **kwargs: Any) -> Iterator[GenericStreamingChunk]:
        messages: list[Any] = kwargs["messages"]
        yield from _chunks(messages, _reply(messages, kwargs.get("optional_params") or {}))

    async def astreaming(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[GenericStreamingChunk]:
        messages: list[Any] = kwargs["messages"]
        # Seconds between text pieces, to watch (and stop) a reply being written; default none.
        pause = float(os.environ.get("CHATBRIDGE_OFFLINE_STREAM_DELAY") or 0)
        for chunk in _chunks(messages, _reply(messages, kwargs.get("optional_params") or {})):
            if pause > 0 and chunk["text"]:
                await asyncio.sleep(pause)
            yield chunk
