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


def litellm_module() -> ModuleType:
    """``litellm``, configured for offline use and with the offline provider registered."""
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
