"""The PostgreSQL pool's check of a connection (``chatbridge.records.pool_check``): a dead
connection is found, and one that passed less than a second ago is not checked again."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from chatbridge.records import pool_check
from tests.test_services import PG_HOST, PG_PORT, require

pytestmark = pytest.mark.services

URL = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/postgres"


def test_a_dead_connection_fails_the_check_and_a_fresh_pass_is_trusted_for_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require("PostgreSQL", PG_HOST, PG_PORT)
    clock = [1000.0]
    monkeypatch.setattr(pool_check, "_clock", lambda: clock[0])
    with psycopg.connect(URL, autocommit=True) as never_checked:
        never_checked.close()
        with pytest.raises(psycopg.OperationalError):
            pool_check.check_connection(never_checked)

    checked = psycopg.connect(URL, autocommit=True)
    pool_check.check_connection(checked)  # it works: passed
    checked.close()  # as a restart would cut it off
    clock[0] += pool_check.CHECK_AFTER / 2
    pool_check.check_connection(checked)  # trusted: not checked again (no round trip)
    clock[0] += pool_check.CHECK_AFTER
    with pytest.raises(psycopg.OperationalError):
        pool_check.check_connection(checked)  # a second on: checked, and found dead


def test_the_postgresql_engine_of_a_database_url_gives_its_pool_this_check() -> None:
    from django.db.utils import ConnectionHandler

    from chatbridge.environment import database_from_url

    settings = database_from_url(f"postgres://postgres@{PG_HOST}:{PG_PORT}/postgres")
    handler = ConnectionHandler({"default": settings})
    wrapper: Any = handler["default"]
    try:
        pool = wrapper.pool
        assert pool is not None
        assert pool._check is pool_check.check_connection  # psycopg's pool keeps it there
    finally:
        wrapper.close_pool()
