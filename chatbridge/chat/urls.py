"""The chat's pages, to include at a URL of the project's choosing:
``path("assistant/", include("chatbridge.chat.urls"))``. Names are in the ``chatbridge``
namespace (``reverse("chatbridge:conversation", args=[id])``)."""

from __future__ import annotations

from django.urls import path

from chatbridge.chat import views

app_name = "chatbridge"

urlpatterns = [
    path("", views.home, name="home"),
    path("c/new/", views.new_conversation, name="new_conversation"),
    path("c/<uuid:conversation_id>/", views.conversation, name="conversation"),
    path("c/<uuid:conversation_id>/rename/", views.rename_conversation, name="rename_conversation"),
    path("c/<uuid:conversation_id>/delete/", views.delete_conversation, name="delete_conversation"),
    path("c/<uuid:conversation_id>/item/", views.sidebar_item, name="sidebar_item"),
    path("tools/", views.tools, name="tools"),
    path("ui/<slug:name>/", views.guest_ui, name="guest_ui"),
    path("elicit/<str:token>/", views.elicit_link, name="elicit_link"),
]
