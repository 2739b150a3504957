"""The project's settings plus pick_tint, whose guest UI speaks only seed 004 (tests/seed004.py),
for servers started by tests/test_browser_guest_ui.py."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from chatbridge.settings import *  # noqa: F403
from chatbridge.settings import BASE_DIR, CHATBRIDGE_PLUGINS, TEMPLATES

CHATBRIDGE_PLUGINS = [*CHATBRIDGE_PLUGINS, "tests.seed004.tint_plugin"]
DIRS = cast(list[Path], TEMPLATES[0]["DIRS"])
TEMPLATES = [{**TEMPLATES[0], "DIRS": [*DIRS, BASE_DIR / "tests" / "templates"]}]
