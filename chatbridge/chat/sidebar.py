"""The sidebar's list of chats past its first page: "Load more chats" (the next page) and the
search of the chats' titles. With htmx, list items for the sidebar; without JavaScript, a page
of their own. Only the owner's chats, under the owner's chat (another's is the missing page)."""

from __future__ import annotations

from uuid import UUID

from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_safe

from chatbridge.chat.chat_list import PAGE_SIZE, ChatList, chat_list
from chatbridge.chat.views import HtmxHttpRequest, missing_page, owned_conversation

__all__ = ["chats", "found_text"]


def found_text(listing: ChatList) -> str:
    """What a search found, in words ("" without a search)."""
    if not listing.query:
        return ""
    if not listing.chats:
        return _("No chat has “%(query)s” in its name.") % {"query": listing.query}
    if listing.more:
        return _("More than %(count)d chats found.") % {"count": PAGE_SIZE}
    count = len(listing.chats)
    return ngettext("%(count)d chat found.", "%(count)d chats found.", count) % {"count": count}


@require_safe
def chats(request: HtmxHttpRequest, conversation_id: UUID) -> HttpResponse:
    """A page of the sidebar's chats, seen from the chat ``conversation_id``: the page after
    ``before`` ("Load more chats"), those whose name holds every word of ``q``, or both."""
    current = owned_conversation(request, conversation_id)
    if current is None:
        return missing_page(request)
    before = request.GET.get("before", "")
    listing = chat_list(current.owner, current, request.GET.get("q", ""), before)
    context = {
        "conversation": current,
        "listing": listing,
        "found": found_text(listing),
        "chat_url": reverse("chatbridge:conversation", args=[current.id]),
    }
    if request.htmx:  # django-htmx's HtmxMiddleware
        # A search replaces the list and says what it found; a next page takes the place of
        # its "Load more chats" and its first chat takes the focus.
        fragment = {
            "next": context["chat_url"],
            "searched": not before,
            "focus_first": bool(before),
        }
        return render(request, "chatbridge/chat_list_items.html", {**context, **fragment})
    return render(
        request, "chatbridge/chat_list_page.html", {**context, "next": request.get_full_path()}
    )
