"""The chat's pages, to include at a URL of the project's choosing:
``path("assistant/", include("chatbridge.chat.urls"))``. Names are in the ``chatbridge``
namespace (``reverse("chatbridge:conversation", args=[id])``). Each page
sends the chat's Content-Security-Policy (``CHATBRIDGE_CSP``, see content_policy.py)."""

from __future__ import annotations

from django.urls import path
from django.views.i18n import JavaScriptCatalog

from chatbridge.chat import sidebar, views
from chatbridge.chat.connection import connection
from chatbridge.chat.content_policy import chat_policy

app_name = "chatbridge"

urlpatterns = [
    path("", chat_policy(views.home), name="home"),
    path("c/new/", chat_policy(views.new_conversation), name="new_conversation"),
    path("c/<uuid:conversation_id>/", chat_policy(views.conversation), name="conversation"),
    path(
        "c/<uuid:conversation_id>/rename/",
        chat_policy(views.rename_conversation),
        name="rename_conversation",
    ),
    path(
        "c/<uuid:conversation_id>/delete/",
        chat_policy(views.delete_conversation),
        name="delete_conversation",
    ),
    path("c/<uuid:conversation_id>/item/", chat_policy(views.sidebar_item), name="sidebar_item"),
    # The sidebar's next page of chats, and its search (?q=), seen from this chat.
    path("c/<uuid:conversation_id>/chats/", chat_policy(sidebar.chats), name="chats"),
    path("tools/", chat_policy(views.tools), name="tools"),
    path("connection/", connection, name="connection"),
    # The chat scripts' words in the page's language (gettext() in chat.js and its siblings).
    path("jsi18n/", JavaScriptCatalog.as_view(packages=["chatbridge.chat"]), name="jsi18n"),
    path("ui/<slug:name>/", chat_policy(views.guest_ui), name="guest_ui"),
    path("elicit/<str:token>/", chat_policy(views.elicit_link), name="elicit_link"),
]
