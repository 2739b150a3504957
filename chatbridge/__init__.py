"""ChatBridge: write an interactive AI tool once, serve it in a web chat and over MCP.

The public API (DESIGN.md §1), re-exported from ``chatbridge.core``. Importing it pulls in no
web framework.
"""

from __future__ import annotations

from chatbridge.core import *  # noqa: F403
from chatbridge.core import __all__ as __all__
