"""The project's settings plus buy_ticket (tests/outage_plugin.py), for the outage tests."""

from __future__ import annotations

from chatbridge.settings import *  # noqa: F403
from chatbridge.settings import CHATBRIDGE_PLUGINS

CHATBRIDGE_PLUGINS = [*CHATBRIDGE_PLUGINS, "tests.outage_plugin.buy_ticket_plugin"]
