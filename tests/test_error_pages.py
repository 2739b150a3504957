"""What a server error shows: Django's DEBUG page and error reports of a URL question's page
never show what the page was posted (a card number, its security code) or the page's locals."""

from __future__ import annotations

import logging
import re

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from pytest_django.fixtures import Settings

from chatbridge.author.elicit import ElicitId, ElicitRequest
from chatbridge.records.url_links import _open
from plugins.book_flight.tool import PaymentDone

pytestmark = pytest.mark.django_db(transaction=True)

CARD = {"name": "Ada Lovelace", "number": "4242 4242 4242 4242", "expiry": "12/39", "cvc": "987"}


def shown(secret: str, page: str) -> bool:
    """Whether ``secret`` stands on ``page``: a number on its own, not digits inside a longer one
    (the DEBUG page names its elements by object ids, such as ``pre140645411898752``, and a
    three-digit code turns up in about one in ten of those pages)."""
    return re.search(rf"(?<!\d){re.escape(secret)}(?!\d)", page) is not None


async def payment_link() -> str:
    """A live link of book_flight's payment question (no call holds it)."""
    request = ElicitRequest.build(
        ElicitId("book_flight", "payment", "call_debug", 4),
        PaymentDone,
        "Pay for your flight",
        {"amount_usd": 420},
        {},
        None,
        "url",
    )
    token, _answer = await sync_to_async(_open)(request)
    return f"/elicit/{token}/"


async def test_a_debug_page_of_a_failed_payment_never_shows_the_card(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """The payment goes through its checks, then reporting it fails (no runtime runs in this
    test: the server error is real). DEBUG shows its technical page: no card digits on it."""
    settings.DEBUG = True
    path = await payment_link()
    client = AsyncClient(raise_request_exception=False)
    with caplog.at_level(logging.CRITICAL, logger="django.request"):
        failed = await client.post(path, CARD)
    page = failed.content.decode()
    assert failed.status_code == 500 and "RuntimeNotRunning" in page  # the DEBUG page
    assert "cvc" in page and "number" in page  # the fields are listed, their values are not
    for secret in ("4242 4242 4242 4242", "4242424242424242", "987", "Ada Lovelace"):
        assert not shown(secret, page)
