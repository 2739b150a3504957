"""A project that requires an account (Django's LoginRequiredMiddleware, as docs/install.md
says): the chat's pages send a visitor to log in; a URL question's page stays open (its link is
the credential, and whoever an MCP client asks may have no account here), and so does the
socket probe; a logged-in user gets the chat."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.urls import reverse

pytestmark = pytest.mark.django_db

AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"


def with_login_required() -> list[str]:
    at = settings.MIDDLEWARE.index(AUTH) + 1
    required = "django.contrib.auth.middleware.LoginRequiredMiddleware"
    return [*settings.MIDDLEWARE[:at], required, *settings.MIDDLEWARE[at:]]


@override_settings(MIDDLEWARE=with_login_required(), LOGIN_URL="/admin/login/")
def test_an_account_is_required_where_the_project_says_so(client: Client) -> None:
    home = reverse("chatbridge:home")
    sent = client.get(home)
    assert sent.status_code == 302 and sent["Location"] == f"/admin/login/?next={home}"
    assert client.get(reverse("chatbridge:tools")).status_code == 302

    # Open without an account: a URL question's page (an unknown link is refused in words,
    # not sent to log in) and the probe of the socket.
    page = client.get(reverse("chatbridge:elicit_link", args=["no-such-link"]))
    assert page.status_code in (404, 410) and b"link" in page.content.lower()
    assert client.get(reverse("chatbridge:connection")).json() == {"sockets": False}

    client.force_login(User.objects.create_user("ada", password="not-used"))
    chat = client.get(home, follow=True)  # to their conversation
    assert chat.status_code == 200 and b'id="connection-state"' in chat.content
    assert "/admin/login/" not in chat.redirect_chain[-1][0]
