"""LLM access for ChatBridge: litellm, with the offline model registered as ``offline/...``.

``litellm`` is imported lazily (it takes seconds) and only after
``LITELLM_LOCAL_MODEL_COST_MAP`` is set, so it never reaches for the network at import. The
offline model needs none of it (``chatbridge.llm.offline``): a server configured with it never
imports litellm unless some code asks for it.
"""

from __future__ import annotations

import os
import threading
from types import ModuleType

from chatbridge.llm.offline import OFFLINE_PROVIDER, is_offline

__all__ = ["OFFLINE_PROVIDER", "is_offline", "litellm_module"]

_lock = threading.Lock()
_module: ModuleType | None = None
_priced: set[str] = set()

# The offline model costs nothing. Said to litellm, its cost lookup of every completion finds
# the price at once instead of searching its map's fallbacks (a fifth of a completion's CPU).
_FREE = {
    "input_cost_per_token": 0.0,
    "output_cost_per_token": 0.0,
    "cache_creation_input_token_cost": 0.0,
    "cache_read_input_token_cost": 0.0,
    "litellm_provider": OFFLINE_PROVIDER,
    "mode": "chat",
}


def litellm_module(model: str | None = None) -> ModuleType:
    """``litellm``, configured for offline use and with the offline provider registered (and
    ``model``'s zero price, when it is an offline model)."""
    module = _configured()
    if model and is_offline(model) and model not in _priced:
        with _lock:
            if model not in _priced:
                module.register_model({model: dict(_FREE)})
                _priced.add(model)
    return module


def _configured() -> ModuleType:
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            from chatbridge.llm.offline_provider import OfflineLLM

            litellm.suppress_debug_info = True
            litellm.telemetry = False
            providers = [
                p for p in litellm.custom_provider_map if p.get("provider") != OFFLINE_PROVIDER
            ]
            providers.append({"provider": OFFLINE_PROVIDER, "custom_handler": OfflineLLM()})
            litellm.custom_provider_map = providers
            _module = litellm
    return _module
