"""Streaming chat completions through litellm (the offline model answers directly): text deltas
as they come, then the message."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Completion", "ToolCallRequest", "stream_completion"]


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call the model made: its id, the tool's name and the raw JSON arguments."""

    id: str
    name: str
    arguments: str

    def to_message(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class Completion:
    """The assembled reply, filled in once the stream ends."""

    text: str = ""
    tool_calls: list[ToolCallRequest] = field(default_factory=list)

    def to_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [c.to_message() for c in self.tool_calls]
        return message


async def stream_completion(
    model: str,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    result: Completion,
) -> AsyncIterator[str]:
    """Yield text deltas; when the iterator ends, ``result`` holds the whole reply."""
    from chatbridge.llm import is_offline, litellm_module, offline

    if is_offline(model):  # the same reply litellm's offline provider streams, without litellm
        answer = offline.reply(messages, tools)
        async for piece in offline.text_deltas(answer):
            yield piece
        result.text = answer.text
        result.tool_calls = [
            ToolCallRequest(c.id, c.name, json.dumps(c.arguments, ensure_ascii=False))
            for c in answer.tool_calls
        ]
        return
    litellm = litellm_module(model)
    kwargs: dict[str, Any] = {"tools": list(tools)} if tools else {}
    stream = await litellm.acompletion(model=model, messages=list(messages), stream=True, **kwargs)
    chunks = []
    async for chunk in stream:
        chunks.append(chunk)
        delta = chunk.choices[0].delta.content if chunk.choices else None
        if delta:
            yield delta
    if not chunks:
        return
    message = litellm.stream_chunk_builder(chunks, messages=list(messages)).choices[0].message
    result.text = message.content or ""
    result.tool_calls = [
        ToolCallRequest(str(c.id), str(c.function.name), c.function.arguments or "{}")
        for c in message.tool_calls or ()
    ]
