"""The offline model as a litellm custom provider: ``model="offline/<anything>"``, for any
code that calls it through litellm (ChatBridge's own completions call ``chatbridge.llm.offline``
directly and give the same answer, pieces and counts)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import GenericStreamingChunk, ModelResponse

from chatbridge.llm import offline
from chatbridge.llm.planner import Reply

__all__ = ["OfflineLLM"]


def _reply(kwargs: dict[str, Any]) -> tuple[list[Any], Reply]:
    messages: list[Any] = kwargs["messages"]
    params = kwargs.get("optional_params") or {}
    return messages, offline.reply(messages, params.get("tools"), params.get("max_tokens"))


def _chunks(messages: list[Any], reply: Reply) -> Iterator[GenericStreamingChunk]:
    for piece in offline.pieces(reply.text) if reply.text else ():
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
        usage={**offline.usage(messages, reply)},  # type: ignore[typeddict-item]
        index=0,
        tool_use=None,
    )


class OfflineLLM(CustomLLM):
    """Answers from ``plan_reply``: no network, no key, same answer for the same input."""

    def completion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        messages, reply = _reply(kwargs)
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
            usage=offline.usage(messages, reply),
        )

    # Deliberately not ``async``: litellm creates this coroutine in a worker thread and awaits
    # it later; a cancellation in between (an aborted session) would leave it never awaited.
    # litellm accepts a ready ModelResponse here, and the offline answer is instant.
    def acompletion(self, *args: Any, **kwargs: Any) -> ModelResponse:  # type: ignore[override]
        return self.completion(*args, **kwargs)

    def streaming(self, *args: Any, **kwargs: Any) -> Iterator[GenericStreamingChunk]:
        yield from _chunks(*_reply(kwargs))

    async def astreaming(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[GenericStreamingChunk]:
        pause = offline.stream_pause()
        for chunk in _chunks(*_reply(kwargs)):
            if pause > 0 and chunk["text"]:
                await asyncio.sleep(pause)
            yield chunk
