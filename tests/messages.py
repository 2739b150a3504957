"""The translation catalogs: extracted from the tree and compiled, the same way by
``make messages`` (``python -m tests.messages``: updates them in place) and by the test that
checks the shipped ones are complete (``tests/test_i18n.py``: in a copy of the tree).

Each app keeps its catalog in its ``locale`` folder (``plugins/<name>/locale``); the strings of
``chatbridge/`` outside ``chatbridge.chat`` go to ``chatbridge/chat/locale`` too (the first of
``LOCALE_PATHS``), which ``chatbridge.chat`` ships in the wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["CATALOGS", "LANGUAGES", "SOURCES", "compile_messages", "make_messages"]

ROOT = Path(__file__).resolve().parent.parent
LANGUAGES = ("fr",)
# What holds translatable strings (copied by the test); the rest of the tree is never read.
SOURCES = ("chatbridge", "plugins", "templates", "manage.py")
IGNORED = ("tests", "bench", "docs", "node_modules", ".venv", "staticfiles", "*/migrations/*")
CATALOGS = (
    "chatbridge/chat/locale",
    *(f"plugins/{p}/locale" for p in ("book_flight", "pick_card", "choose_color")),
)


def _manage(root: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(root), "DJANGO_SETTINGS_MODULE": "chatbridge.settings"}
    subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )


def make_messages(root: Path = ROOT) -> None:
    """Extract the strings of the tree under ``root`` into its catalogs (``django`` from
    Python and templates, ``djangojs`` from the chat's scripts)."""
    for catalog in CATALOGS:
        (root / catalog).mkdir(parents=True, exist_ok=True)
    ignored = [f"--ignore={pattern}" for pattern in IGNORED]
    for language in LANGUAGES:
        _manage(
            root,
            "makemessages",
            "-l",
            language,
            "--no-obsolete",
            "--add-location=file",
            *ignored,
            "--ignore=*/static/*",
        )
        _manage(
            root,
            "makemessages",
            "-l",
            language,
            "-d",
            "djangojs",
            "--no-obsolete",
            "--add-location=file",
            *ignored,
        )


def compile_messages(root: Path = ROOT) -> None:
    """Compile every catalog of the tree under ``root`` (the ``.mo`` files Django reads)."""
    languages = [arg for language in LANGUAGES for arg in ("-l", language)]
    _manage(root, "compilemessages", *languages, *(f"--ignore={p}" for p in IGNORED))


if __name__ == "__main__":
    make_messages()
    compile_messages()
