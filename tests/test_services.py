"""Scale-out configuration on the real services: PostgreSQL (DATABASE_URL), Redis (REDIS_URL).

These run whenever the services answer; in CI (``CI`` set) an unreachable service fails the
run instead of skipping it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import migrated_postgres

ROOT = Path(__file__).resolve().parent.parent
PG_HOST, PG_PORT = os.environ.get("CHATBRIDGE_TEST_PG", "127.0.0.1:5432").split(":")
REDIS_HOST, REDIS_PORT = os.environ.get("CHATBRIDGE_TEST_REDIS", "127.0.0.1:6379").split(":")

pytestmark = pytest.mark.services


def require(name: str, host: str, port: str) -> None:
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return
    except OSError as exc:
        message = f"{name} at {host}:{port} is not reachable ({exc})"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must run the service tests")
        pytest.skip(message)


def run_django(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup()\n{code}"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "chatbridge.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def postgres_url() -> Iterator[str]:
    require("PostgreSQL", PG_HOST, PG_PORT)
    import psycopg

    name = f"chatbridge_test_{uuid.uuid4().hex[:10]}"
    admin = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgres://postgres@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def migrated_postgres_url() -> Iterator[str]:
    """A PostgreSQL database of its own, migrated: a copy of the run's template (a ``migrate``
    costs seconds of CPU; ``postgres_url`` is empty, for the test of migrating)."""
    require("PostgreSQL", PG_HOST, PG_PORT)
    with migrated_postgres(PG_HOST, PG_PORT) as url:
        yield url


def test_migrations_run_on_postgresql(postgres_url: str) -> None:
    out = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": postgres_url},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    vendor = run_django(
        "from django.db import connection\n"
        "from django.contrib.auth.models import User\n"
        "User.objects.create(username='pg-check')\n"
        "print(connection.vendor, User.objects.filter(username='pg-check').count())",
        DATABASE_URL=postgres_url,
    )
    assert vendor.split() == ["postgresql", "1"]


def test_redis_url_selects_the_redis_channel_layer_and_carries_messages() -> None:
    require("Redis", REDIS_HOST, REDIS_PORT)
    out = run_django(
        "import asyncio\n"
        "from channels.layers import get_channel_layer\n"
        "async def main():\n"
        "    layer = get_channel_layer()\n"
        "    channel = await layer.new_channel()\n"
        f"    await layer.group_add('chatbridge-check-{uuid.uuid4().hex[:6]}', channel)\n"
        "    await layer.send(channel, {'type': 'ping', 'text': 'über'})\n"
        "    message = await asyncio.wait_for(layer.receive(channel), 5)\n"
        "    print(type(layer).__name__, message['text'])\n"
        "asyncio.run(main())",
        REDIS_URL=f"redis://{REDIS_HOST}:{REDIS_PORT}/0",
    )
    assert out.split() == ["WorkersLayer", "über"]


def test_without_urls_the_embedded_defaults_are_used() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup()\n"
            "from django.conf import settings\n"
            "print(settings.DATABASES['default']['ENGINE'],"
            " settings.CHANNEL_LAYERS['default']['BACKEND'])",
        ],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "chatbridge.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.split() == [
        "django.db.backends.sqlite3",
        "channels.layers.InMemoryChannelLayer",
    ]
