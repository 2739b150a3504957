"""The demo site's URLs: the chat at the root (as any project includes it) and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("chatbridge.chat.urls")),
    path("admin/", admin.site.urls),
]
