"""The SQLite database holds conversations, answers and journals: only its owner reads it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.servers import ROOT


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def run_django(database: Path, code: str) -> None:
    """Run ``code`` in a fresh process on ``database``, with the usual umask (022)."""
    subprocess.run(
        [sys.executable, "-c", f"import django; django.setup()\n{code}"],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": f"sqlite:///{database}",
            "DJANGO_SETTINGS_MODULE": "chatbridge.settings",
        },
        check=True,
        timeout=120,
        preexec_fn=lambda: os.umask(0o022),
    )


# The connection is left open at exit: the -wal and -shm files are still there to look at.
KEEP_OPEN = (
    "from django.core.management import call_command\n"
    "from django.db import connection\n"
    "call_command('migrate', '--noinput', '-v0')\n"
    "from chatbridge.records.models import Conversation\n"
    "Conversation.objects.create(owner='permissions-check')\n"
    "import os, stat, sys\n"
    "name = connection.settings_dict['NAME']\n"
    "for path in (name, f'{name}-wal', f'{name}-shm'):\n"
    "    print(path, oct(stat.S_IMODE(os.stat(path).st_mode)))\n"
    "    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path\n"
)


@pytest.mark.slow  # a fresh process sets Django up and migrates
def test_a_new_database_and_its_wal_files_are_readable_by_their_owner_only(
    tmp_path: Path,
) -> None:
    database = tmp_path / "db.sqlite3"
    run_django(database, KEEP_OPEN)
    assert mode(database) == 0o600


@pytest.mark.slow  # a fresh process sets Django up and migrates
def test_an_existing_world_readable_database_is_made_private(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    database.touch(mode=0o644)
    os.chmod(database, 0o644)
    run_django(database, KEEP_OPEN)
    assert mode(database) == 0o600


@pytest.mark.django_db
def test_the_test_database_is_private_too() -> None:
    connection.ensure_connection()
    assert mode(Path(connection.settings_dict["NAME"])) == 0o600
