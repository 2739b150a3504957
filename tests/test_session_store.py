"""The demo site's session store (``chatbridge.chat.session_store``): a new visitor's session
is one INSERT, and it is Django's database session in every other way."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

pytestmark = pytest.mark.django_db(transaction=True)


def session_statements(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"].split()[0] for q in queries.captured_queries if "django_session" in q["sql"]]


def test_a_new_visitor_costs_one_insert_and_keeps_their_chat(client: Client) -> None:
    assert settings.SESSION_ENGINE == "chatbridge.chat.session_store"
    with CaptureQueriesContext(connection) as first:
        home = client.get("/")
    assert home.status_code == 302
    assert session_statements(first) == ["INSERT"]  # no key-exists read, no second write
    # Their first chat is written with it, in one transaction, and nothing is read: a visitor
    # who has no session yet has no chat and has started none this hour.
    statements = [q["sql"].split()[0] for q in first.captured_queries]
    kept = [s for s in statements if s not in ("SAVEPOINT", "RELEASE")]
    assert kept == ["BEGIN", "INSERT", "INSERT", "COMMIT"]
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    # The browser comes back with its cookie: the same session, so the same chat.
    with CaptureQueriesContext(connection) as again:
        assert client.get("/")["Location"] == home["Location"]
    assert session_statements(again) == ["SELECT"]
    assert client.cookies[settings.SESSION_COOKIE_NAME].value == cookie


def test_a_session_that_changes_is_written_and_a_login_gets_a_new_key(client: Client) -> None:
    client.get("/")
    before = client.cookies[settings.SESSION_COOKIE_NAME].value
    User.objects.create_user("ada", password="pw-123456")
    assert client.login(username="ada", password="pw-123456")
    after = client.cookies[settings.SESSION_COOKIE_NAME].value
    assert after != before  # cycled on login, as Django does
    # What the login put in the session is on record under the new key.
    engine = __import__(settings.SESSION_ENGINE, fromlist=["SessionStore"])
    stored = engine.SessionStore(after).load()
    assert stored.get("_auth_user_id") == str(User.objects.get(username="ada").pk)
