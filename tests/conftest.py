"""Shared fixtures: a session manager on the offline model, and an event reader."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import AsyncIterator  # noqa: E402

import pytest  # noqa: E402
from channels.layers import channel_layers  # noqa: E402

from chatbridge import SessionManager  # noqa: E402
from chatbridge.chat import runtime  # noqa: E402
from chatbridge.core.sampling import LiteLLMSampler  # noqa: E402


@pytest.fixture
async def manager() -> AsyncIterator[SessionManager]:
    """A manager sampling through litellm's offline provider; every session ends with the test."""
    mgr = SessionManager(sampler=LiteLLMSampler("offline/test"))
    yield mgr
    await mgr.shutdown("test finished")


@pytest.fixture
async def fresh_runtime() -> AsyncIterator[None]:
    """Each test gets its own hub, session manager and channel layer, shut down afterwards."""
    runtime.get_hub.cache_clear()
    runtime.get_session_manager.cache_clear()
    channel_layers.backends.clear()
    yield
    await runtime.get_hub().close()
    await runtime.get_session_manager().shutdown()
    runtime.get_hub.cache_clear()
    runtime.get_session_manager.cache_clear()
