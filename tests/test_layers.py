"""DESIGN §8: the runtime core imports no web stack; plugins use only the public API."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEB = ("django", "channels", "daphne", "chatbridge.chat", "chatbridge.mcp")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_and_llm_modules_import_nothing_from_the_web_stack() -> None:
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for folder in ("chatbridge/core", "chatbridge/llm")
        for path in (ROOT / folder).glob("*.py")
        for name in imported_modules(path)
        if name.startswith(WEB)
    }
    assert offenders == set()


def test_importing_the_public_api_loads_no_web_framework() -> None:
    code = (
        "import sys, chatbridge, chatbridge.core.manager, chatbridge.core.plugins\n"
        "import chatbridge.llm\n"
        "web = ('django', 'channels', 'daphne')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in web)\n"
        "print(loaded)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_session_runs_with_plain_asyncio_and_no_web_stack() -> None:
    code = """
import asyncio, sys
from chatbridge import Accept, SessionManager
from chatbridge.core.sampling import LiteLLMSampler
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


def test_plugins_use_only_the_public_chatbridge_api() -> None:
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "plugins").rglob("*.py")
        for name in imported_modules(path)
        if name.startswith("chatbridge.")
    }
    assert offenders == set()
