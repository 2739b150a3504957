"""The chat pages and the HTML side of the socket: ownership, CSRF, escaping, fragments."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from chatbridge.chat.models import Conversation
from tests.chat_client import html_socket

pytestmark = pytest.mark.django_db(transaction=True)


def test_home_starts_a_conversation_and_shows_the_composer(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert re.fullmatch(r"/c/[0-9a-f-]{36}/", response["Location"])
    page = client.get(response["Location"]).content.decode()
    assert '<label for="message-box">Message</label>' in page
    assert 'ws-connect="/ws/chat/' in page
    # Collected static files under hashed names, so browsers may cache them for good.
    assert re.search(r'src="/static/django_htmx/htmx-2\.min\.[0-9a-f]{12}\.js"', page)
    assert re.search(r'src="/static/django_htmx/ext/hx-ws-2\.min\.[0-9a-f]{12}\.js"', page)
    assert client.get("/")["Location"] == response["Location"]  # the same one next time


def test_another_browsers_conversation_is_not_found(client: Client) -> None:
    other = Conversation.objects.create(owner="session:someone-else")
    assert client.get(f"/c/{other.id}/").status_code == 404


def test_new_chat_needs_a_csrf_token() -> None:
    browser = Client(enforce_csrf_checks=True)
    page = browser.get(browser.get("/")["Location"]).content.decode()
    assert browser.post("/c/new/").status_code == 403
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    response = browser.post("/c/new/", {"csrfmiddlewaretoken": token.group(1)})
    assert response.status_code == 302
    assert Conversation.objects.count() == 2


@pytest.mark.usefixtures("fresh_runtime")
async def test_htmx_forms_work_and_everything_is_escaped() -> None:
    socket = await html_socket()
    hostile = "<script>alert(1)</script> book a flight from <b>JFK</b> to <img src=x>"
    await socket.send_to(
        text_data=json.dumps(
            {"command": "user_message", "text": hostile, "HEADERS": {"HX-Request": "true"}}
        )
    )
    fragments = []
    while not any('name="flight_id"' in f for f in fragments):
        fragments.append(await socket.receive_from(timeout=10))
    html = "\n".join(fragments)
    assert "<script>alert(1)</script>" not in html and "<img src=x>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;JFK&lt;/b&gt;" in html  # the tool's arguments, as the model passed them
    assert 'hx-swap-oob="beforeend:#transcript"' in html
    form = next(f for f in fragments if 'name="flight_id"' in f)
    assert 'hx-swap-oob="true"' in form and 'id="elicit-' in form
    ids = dict(re.findall(r'name="(session_id|call_id|elicit_id)" value="([^"]+)"', form))
    await socket.send_to(
        text_data=json.dumps(
            {"command": "elicit_response", **ids, "action": "decline", "HEADERS": {}}
        )
    )
    done = []
    while not any("Declined" in f for f in done):
        done.append(await socket.receive_from(timeout=10))
    await socket.disconnect()
