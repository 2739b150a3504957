"""The demo site's URLs: the chat at the root (as any project includes it) and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Pages that name no icon (the admin's) make browsers ask for /favicon.ico: the chat's.
    Its static URL is read per request (a hashed name exists once collectstatic has run)."""
    return HttpResponseRedirect(static("chatbridge/favicon.svg"))


urlpatterns = [
    path("", include("chatbridge.chat.urls")),
    path("admin/", admin.site.urls),
    path("favicon.ico", favicon),
]
