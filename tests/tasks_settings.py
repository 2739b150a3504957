"""The project's settings plus the trip tool (three questions, a sample and a step), for servers
started by tests/test_mcp_tasks.py."""

from __future__ import annotations

from chatbridge.settings import *  # noqa: F403
from chatbridge.settings import CHATBRIDGE_PLUGINS

CHATBRIDGE_PLUGINS = [*CHATBRIDGE_PLUGINS, "tests.support.trip_plugin"]
