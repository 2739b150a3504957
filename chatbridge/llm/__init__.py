"""LLM access for ChatBridge: litellm, with the offline model registered as ``offline/...``.

``litellm`` is imported lazily (it takes seconds) and only after
``LITELLM_LOCAL_MODEL_COST_MAP`` is set, so it never reaches for the network at import.
"""

from __future__ import annotations

import os
import threading
from types import ModuleType

__all__ = ["OFFLINE_PROVIDER", "litellm_module"]

OFFLINE_PROVIDER = "offline"

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
    if model and model.startswith(f"{OFFLINE_PROVIDER}/") and model not in _priced:
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

            from chatbridge.llm.offline import OfflineLLM

            litellm.suppress_debug_info = True
            litellm.telemetry = False
            providers = [
                p for p in litellm.custom_provider_map if p.get("provider") != OFFLINE_PROVIDER
            ]
            providers.append({"provider": OFFLINE_PROVIDER, "custom_handler": OfflineLLM()})
            litellm.custom_provider_map = providers
            _module = litellm
    return _module
