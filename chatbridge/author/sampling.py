"""``ctx.sample``: server-side LLM completions through litellm."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from chatbridge.author.exceptions import SamplingError

__all__ = [
    "DEFAULT_MODEL",
    "LiteLLMSampler",
    "SampleRequest",
    "SampleResult",
    "Sampler",
    "configured_model",
]

DEFAULT_MODEL = "offline/chatbridge-1"

Message = Mapping[str, Any]


def configured_model() -> str:
    """The model string from ``CHATBRIDGE_MODEL``, else the offline model."""
    return os.environ.get("CHATBRIDGE_MODEL") or DEFAULT_MODEL


@dataclass(frozen=True)
class SampleRequest:
    """What a tool asked the LLM."""

    messages: list[dict[str, Any]]
    max_tokens: int | None = None

    @classmethod
    def build(
        cls,
        prompt: str | Sequence[Message],
        system: str | None = None,
        max_tokens: int | None = None,
    ) -> SampleRequest:
        if isinstance(prompt, str):
            messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        else:
            messages = [dict(m) for m in prompt]
            for m in messages:
                if not isinstance(m.get("role"), str) or "content" not in m:
                    raise ValueError(
                        f"ctx.sample messages need 'role' and 'content', got {sorted(m)}"
                    )
        if system is not None:
            messages.insert(0, {"role": "system", "content": system})
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        return cls(messages, max_tokens)


@dataclass(frozen=True)
class SampleResult:
    """An LLM completion: its text, the model that wrote it and the token usage."""

    text: str
    model: str
    usage: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "model": self.model, "usage": dict(self.usage)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SampleResult:
        return cls(str(data["text"]), str(data["model"]), dict(data.get("usage") or {}))


class Sampler(Protocol):
    """Anything that turns a ``SampleRequest`` into a ``SampleResult``."""

    async def __call__(self, request: SampleRequest) -> SampleResult: ...


class LiteLLMSampler:
    """Completes through ``litellm.acompletion`` with a configured model string."""

    def __init__(self, model: str | None = None, **options: Any) -> None:
        self.model = model or configured_model()
        self.options = options

    async def __call__(self, request: SampleRequest) -> SampleResult:
        from chatbridge.llm import is_offline, litellm_module, offline

        if is_offline(self.model):  # what litellm's offline provider answers, without litellm
            answer = offline.reply(request.messages, None, request.max_tokens)
            return SampleResult(answer.text, self.model, offline.usage(request.messages, answer))
        litellm = litellm_module(self.model)  # imported lazily: litellm takes seconds
        kwargs: dict[str, Any] = dict(self.options)
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        try:
            response = await litellm.acompletion(
                model=self.model, messages=request.messages, **kwargs
            )
        except Exception as exc:  # provider errors come in many types; keep the cause
            raise SamplingError(self.model, exc) from exc
        choice = response.choices[0]
        usage = getattr(response, "usage", None)
        counts = {
            k: int(getattr(usage, k, 0) or 0)
            for k in ("prompt_tokens", "completion_tokens", "total_tokens")
        }
        return SampleResult(choice.message.content or "", self.model, counts)
