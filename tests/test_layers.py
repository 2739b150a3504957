"""DESIGN §8 at run time: the public API and a session load no web stack (the import rules
themselves are import-linter contracts in pyproject.toml, run by make lint)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_importing_the_public_api_loads_no_web_framework() -> None:
    code = (
        "import sys, chatbridge, chatbridge.calls.manager, chatbridge.author.plugins\n"
        "import chatbridge.llm\n"
        "web = ('django', 'channels', 'daphne')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in web)\n"
        "print(loaded)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.slow  # a fresh interpreter runs a whole call (litellm's import alone takes seconds)
def test_a_session_runs_with_plain_asyncio_and_no_web_stack() -> None:
    code = """
import asyncio, sys
from chatbridge import Accept, SessionManager
from chatbridge.author.sampling import LiteLLMSampler
from tests.support import trip_tool

async def main():
    manager = SessionManager(sampler=LiteLLMSampler("offline/plain"))
    session = await manager.create(trip_tool, {"city": "Bergen", "nights": 1}, call_id="p")
    answers = [{"hotel": "Harbour Inn"}, {"ok": True}, {"stars": 5}]
    while True:
        event = await session.next_event()
        if event.type == "elicit":
            await session.respond_to_elicit(event.request.id, Accept(answers.pop(0)))
        elif event.type in ("completed", "failed", "aborted"):
            return event

event = asyncio.run(main())
web = [m for m in sys.modules if m.split(".")[0] in ("django", "channels", "daphne")]
print(event.type, event.result["stars"], web)
"""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "completed 5 []"
