"""The project's settings with a trusted origin, for servers started by tests/test_origins.py."""

from __future__ import annotations

from chatbridge.settings import *  # noqa: F403

CSRF_TRUSTED_ORIGINS = ["https://app.example.test"]
