"""The process-wide ``SessionManager``: created once, owned by the process, not by any socket."""

from __future__ import annotations

from functools import cache

from django.conf import settings

from chatbridge.core import SessionManager
from chatbridge.core.sampling import LiteLLMSampler

__all__ = ["get_session_manager"]


@cache
def get_session_manager() -> SessionManager:
    """The one manager of this process, configured from the settings."""
    timeout = settings.CHATBRIDGE_SESSION_IDLE_TIMEOUT
    return SessionManager(
        sampler=LiteLLMSampler(settings.CHATBRIDGE_MODEL),
        idle_timeout=timeout if timeout and timeout > 0 else None,
    )
