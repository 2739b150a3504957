"""The pytest plugin installed with django-chatbridge (its ``pytest11`` entry point): fixtures
for testing tools. Importing it costs nothing: ``chatbridge.testing`` is imported by the
fixture, when a test asks for it.

    async def test_greets(run_tool):
        run = await run_tool(greet, {"name": "Ada"})
        assert run.status == "completed"

Async tests need pytest-asyncio (the ``testing`` extra installs it): ``asyncio_mode = "auto"``
in the project's pytest configuration, or ``@pytest.mark.asyncio`` on each test.
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["run_tool"]


@pytest.fixture
def run_tool() -> Any:
    """``chatbridge.testing.run_tool``: run a tool to its end, answering from a script."""
    from chatbridge.testing import run_tool as run

    return run
