"""Settings for the benchmark servers: the project's settings plus the benchmark-only plugins."""

from chatbridge.settings import *  # noqa: F403
from chatbridge.settings import CHATBRIDGE_PLUGINS, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench"]
CHATBRIDGE_PLUGINS = [
    *CHATBRIDGE_PLUGINS,
    "bench.loop_plugin.loop_plugin",
    "bench.mcp_booking_plugin.book_two_plugin",
]
