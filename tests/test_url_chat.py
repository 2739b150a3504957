"""URL questions in the chat: book_flight's payment page behind a one-time link."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.template.loader import render_to_string
from django.test import AsyncClient
from django.utils import timezone
from django.views.debug import ExceptionReporter

from chatbridge.author.elicit import result_from_dict
from chatbridge.cluster.page_answers import deliver
from chatbridge.records.lease import CallLease
from chatbridge.records.models import ElicitLink
from chatbridge.records.writer import flush
from chatbridge.runtime import current_runtime
from tests.chat_client import ChatClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]

CARD = "5555555555554444"  # a Mastercard test number
PAYMENT = {"name": "Ada Lovelace", "number": "5555 5555 5555 4444", "expiry": "12/39", "cvc": "123"}


@pytest.fixture
async def chat() -> AsyncIterator[ChatClient]:
    client = await ChatClient.start()
    yield client
    await client.close()


async def to_payment(chat: ChatClient) -> dict[str, Any]:
    """Book JFK-LAX up to the payment question; its form event."""
    await chat.send_user("Book a flight from JFK to LAX")
    flights = await chat.next("elicit", key="pick_flight")
    await chat.answer(flights, flight_id=flights["context"]["flights"][0]["id"])
    seats = await chat.next("elicit", key="pick_seat")
    await chat.answer(seats, seat_label=next_free(seats))
    review = await chat.next("elicit", key="review")
    assert review["context"]["seat"] == next_free(seats)
    await chat.answer(review, confirm=True)
    return await chat.next("elicit", key="payment")


def next_free(seats: dict[str, Any]) -> str:
    seat_map = seats["context"]["seat_map"]
    return next(
        f"{row}{seat}"
        for row in range(1, seat_map["rows"] + 1)
        for seat in seat_map["seats"]
        if f"{row}{seat}" not in seat_map["taken"]
    )


def page_of(form: dict[str, Any]) -> str:
    assert form["mode"] == "url" and form["url"]
    url = urlsplit(form["url"])
    assert (url.scheme, url.netloc) == ("http", "127.0.0.1")  # the chat page's origin
    return url.path


async def test_payment_on_its_page_resumes_the_chat_and_keeps_the_card_out(
    chat: ChatClient,
) -> None:
    form = await to_payment(chat)
    assert "Continue to secure payment on 127.0.0.1" in form["html"]
    assert 'target="_blank"' in form["html"]
    path = page_of(form)
    client = AsyncClient(enforce_csrf_checks=True)

    page = await client.get(path)
    assert page.status_code == 200 and "Pay $" in page.content.decode()
    assert page["Cache-Control"] == "no-store" and page["X-Frame-Options"] == "DENY"
    token = page.cookies["csrftoken"].value
    refused = await client.post(path, PAYMENT)  # no CSRF token
    assert refused.status_code == 403

    bad = await client.post(
        path, {**PAYMENT, "number": "5555555555554445", "csrfmiddlewaretoken": token}
    )
    assert bad.status_code == 400
    assert "This card number is not valid: check the digits." in bad.content.decode()
    real = await client.post(
        path, {**PAYMENT, "number": "4111 1111 1111 1112", "csrfmiddlewaretoken": token}
    )
    assert "This card number is not valid" in real.content.decode()
    other = await client.post(
        path, {**PAYMENT, "number": "4111111111111111", "csrfmiddlewaretoken": token}
    )
    assert "This demo takes test cards only" in other.content.decode()
    assert "4111111111111111" not in other.content.decode()  # not shown back either

    done = await client.post(path, {**PAYMENT, "csrfmiddlewaretoken": token})
    assert done.status_code == 200 and "card ending in 4444" in done.content.decode()
    complete = (
        await chat.next("elicit_complete", key=None)
        if False
        else await chat.next("elicit_complete")
    )
    assert (complete["action"], complete["note"]) == ("accept", "completed on its page")
    result = (await chat.next("tool_call", status="completed"))["result"]
    assert result["booked"] is True and result["paid"] == {"last4": "4444"}
    await chat.turn_done()

    again = await client.post(path, {**PAYMENT, "csrfmiddlewaretoken": token})
    assert again.status_code == 410 and "already used" in again.content.decode()
    assert (await client.get(path)).status_code == 410

    await flush()
    dump = io.StringIO()
    await sync_to_async(call_command)("dumpdata", stdout=dump)
    everything = dump.getvalue() + repr(chat.events)
    assert "4444" in everything  # the last four digits are kept
    for secret in (CARD, "5555 5555 5555 4444", "4111111111111111"):
        assert secret not in everything


async def test_expired_and_unknown_links_are_refused(chat: ChatClient) -> None:
    form = await to_payment(chat)
    path = page_of(form)
    client = AsyncClient()
    assert (await client.get(path[:-5] + "xxxx/")).status_code == 404
    await ElicitLink.objects.filter(elicit_id=form["elicit_id"]).aupdate(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    expired = await client.post(path, PAYMENT)
    assert expired.status_code == 410 and "This link has expired" in expired.content.decode()


async def test_declining_in_the_chat_ends_the_link(chat: ChatClient) -> None:
    form = await to_payment(chat)
    await chat.answer(form, action="decline")
    result = (await chat.next("tool_call", status="completed"))["result"]
    assert result == {"booked": False, "reason": "payment declined"}
    assert (await AsyncClient().get(page_of(form))).status_code == 410


async def test_a_forged_accept_from_the_chat_is_refused(chat: ChatClient) -> None:
    form = await to_payment(chat)
    await chat.answer(form, payment_token="x" * 20, last4="0000")
    again = await chat.next("elicit", key="payment")
    assert again["errors"] == {"__all__": ["Open the link to answer this question on its page."]}
    assert again["url"] == form["url"]


async def test_error_reports_never_show_the_card(chat: ChatClient) -> None:
    """Django's error reports (mailed to admins, logged) list a request's POST: a URL
    question's page hides all of it, whatever the plugin's field names."""
    form = await to_payment(chat)
    done = await AsyncClient().post(page_of(form), PAYMENT)
    assert done.status_code == 200
    report = ExceptionReporter(done.asgi_request, None, None, None).get_traceback_text()
    assert "number" in report  # the field is listed, its value is not
    for secret in ("5555 5555 5555 4444", CARD, "Ada Lovelace"):
        assert secret not in report


async def test_an_expired_link_is_renewed_for_its_chat_and_the_booking_goes_on(
    chat: ChatClient,
) -> None:
    """The card's link expired while the question is open: the booking is not cancelled. A
    stranger holding the link is refused; the chat's owner is sent on to a fresh link and
    pays there."""
    form = await to_payment(chat)
    await ElicitLink.objects.filter(elicit_id=form["elicit_id"]).aupdate(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    stranger = await AsyncClient().get(page_of(form))
    assert stranger.status_code == 410 and "This link has expired" in stranger.content.decode()

    owner = AsyncClient(enforce_csrf_checks=True)
    owner.cookies["sessionid"] = chat.session_key
    sent_on = await owner.get(page_of(form))
    assert sent_on.status_code == 303
    fresh = sent_on["Location"]
    assert fresh.startswith("/elicit/") and fresh != page_of(form)
    page = await owner.get(fresh)
    assert page.status_code == 200 and "Pay $" in page.content.decode()
    token = page.cookies["csrftoken"].value
    done = await owner.post(fresh, {**PAYMENT, "csrfmiddlewaretoken": token})
    assert done.status_code == 200 and "card ending in 4444" in done.content.decode()
    result = (await chat.next("tool_call", status="completed"))["result"]
    assert result["booked"] is True and result["paid"] == {"last4": "4444"}
    assert not [
        e for e in chat.events if e["type"] == "elicit_complete" and e["action"] != "accept"
    ]
    assert (await owner.get(page_of(form))).status_code == 404  # the old link is gone


async def test_a_decline_racing_a_payment_that_went_through_loses(chat: ChatClient) -> None:
    """The page marked the link used (its compare-and-set) and its answer is on the way when
    the user declines in the chat: the payment counts, the decline does not."""
    form = await to_payment(chat)
    paid = {"action": "accept", "content": {"payment_token": "t" * 24, "last4": "4444"}}
    await ElicitLink.objects.filter(elicit_id=form["elicit_id"]).aupdate(
        completed_at=timezone.now(), result=paid
    )
    await chat.answer(form, action="decline")
    await chat.next("elicit_response", action="decline")  # the form took it; the link did not
    manager = current_runtime().manager
    holder = await CallLease().holder(form["call_id"])
    answer = result_from_dict(paid)
    await deliver(manager, form["call_id"], form["elicit_id"], answer, holder=holder)
    # The question's close and the call's end are told by two tasks (the form's host, the
    # tool): in either order. Each is waited for by what it is.
    closed = await chat.next("elicit_complete", elicit_id=form["elicit_id"])
    assert (closed["action"], closed["note"]) == ("accept", "completed on its page")
    ended = [e for e in chat.events if e["type"] == "tool_call" and e["status"] == "completed"]
    result = (ended[0] if ended else await chat.next("tool_call", status="completed"))["result"]
    assert result["booked"] is True and result["paid"] == {"last4": "4444"}


async def test_digits_that_are_not_ascii_are_refused_in_words(chat: ChatClient) -> None:
    form = await to_payment(chat)
    client = AsyncClient()
    for number, cvc in (("4242 4242 4242 424²", "123"), ("4242424242424242", "¹²³")):
        refused = await client.post(page_of(form), {**PAYMENT, "number": number, "cvc": cvc})
        assert refused.status_code == 400
        text = refused.content.decode()
        assert "This card number is not valid" in text or "security code" in text


def test_the_link_card_escapes_what_tools_say() -> None:
    """The label and the link come from a tool's context and the session: text, never markup."""
    hostile = '"><img src=x onerror=alert(1)>'
    html = render_to_string(
        "chatbridge/url_question.html",
        {"url": f"http://127.0.0.1/elicit/x/{hostile}", "host": hostile, "link_label": hostile},
    )
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert 'href="http://127.0.0.1/elicit/x/&quot;&gt;&lt;img' in html
