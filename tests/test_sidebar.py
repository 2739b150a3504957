"""The sidebar: New chat reuses an empty chat, rename and delete (the owner's, with CSRF), and
the pages for an unknown conversation."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from chatbridge.records.models import Conversation, Message, ToolSession

pytestmark = pytest.mark.django_db


def _open(client: Client) -> Conversation:
    return Conversation.objects.get(pk=client.get("/")["Location"].split("/")[2])


def _say(conversation: Conversation, text: str) -> None:
    seq = conversation.messages.count() + 1
    Message.objects.create(
        id=f"{conversation.id}-{seq}", conversation=conversation, seq=seq, role="user", content=text
    )
    conversation.title = text
    conversation.save()


def _listed(page: str) -> list[str]:
    nav = re.search(r'<nav aria-label="Conversations">.*?</nav>', page, re.S)
    assert nav is not None
    return re.findall(r'<a id="conv-([0-9a-f-]+)"', nav.group(0))


def test_new_chat_reuses_the_empty_chat_and_empty_chats_are_not_listed(client: Client) -> None:
    first = _open(client)
    assert client.post("/c/new/")["Location"] == f"/c/{first.id}/"  # still empty: the same
    _say(first, "Book a flight")
    second_url = client.post("/c/new/")["Location"]
    assert second_url != f"/c/{first.id}/"
    assert client.post("/c/new/")["Location"] == second_url  # no pile of empty chats
    assert Conversation.objects.count() == 2
    # Another owner's empty chat is never reused.
    Conversation.objects.create(owner="session:someone-else")
    assert client.post("/c/new/")["Location"] == second_url
    second = Conversation.objects.get(pk=second_url.split("/")[2])
    # The current chat is listed even empty; an empty chat that is not current is not.
    assert _listed(client.get(second_url).content.decode()) == [str(second.id), str(first.id)]
    third = Conversation.objects.create(owner=first.owner)
    _say(third, "Pick a card")
    page = client.get(f"/c/{third.id}/").content.decode()
    assert str(second.id) not in _listed(page)
    assert _listed(page) == [str(third.id), str(first.id)]
    assert 'aria-current="page">Pick a card</a>' in page


def test_rename_a_chat(client: Client) -> None:
    chat = _open(client)
    _say(chat, "Book a flight")
    page = client.get(f"/c/{chat.id}/").content.decode()
    item = re.search(rf'<li class="conv-item[^"]*" id="conv-item-{chat.id}">.*?</li>', page, re.S)
    assert item is not None and ">Book a flight</a>" in item.group(0)
    for action in ("Rename", "Delete"):  # described by the chat's name
        assert f'aria-describedby="conv-{chat.id}"' in item.group(0)
        assert f'<span class="visually-hidden">{action}</span></button>' in item.group(0)
    form = client.get(f"/c/{chat.id}/rename/?next=/c/{chat.id}/").content.decode()
    assert "<h1>Rename chat</h1>" in form and 'value="Book a flight"' in form
    inline = client.get(f"/c/{chat.id}/rename/?next=/c/{chat.id}/", headers={"HX-Request": "true"})
    assert "<h1>" not in inline.content.decode() and "data-autofocus" in inline.content.decode()
    response = client.post(
        f"/c/{chat.id}/rename/", {"title": "  Trip to   LA ", "next": f"/c/{chat.id}/"}
    )
    assert response.status_code == 302 and response["Location"] == f"/c/{chat.id}/"
    chat.refresh_from_db()
    assert chat.title == "Trip to LA"
    empty = client.post(f"/c/{chat.id}/rename/", {"title": "   "})
    assert empty.status_code == 400 and "Give the chat a name" in empty.content.decode()
    assert 'aria-invalid="true"' in empty.content.decode()
    client.post(f"/c/{chat.id}/rename/", {"title": "x" * 500})
    chat.refresh_from_db()
    assert chat.title == "x" * 120  # what fits
    # Only to this site: a "next" elsewhere is ignored.
    away = client.post(f"/c/{chat.id}/rename/", {"title": "x", "next": "https://evil.example/"})
    assert away["Location"] == f"/c/{chat.id}/"


def test_delete_a_chat_after_confirming(client: Client) -> None:
    keep, gone = _open(client), None
    _say(keep, "Keep me")
    gone = Conversation.objects.create(owner=keep.owner)
    _say(gone, "Delete me")
    confirm = client.get(f"/c/{gone.id}/delete/?next=/c/{keep.id}/").content.decode()
    assert "Delete “Delete me”?" in confirm and "cannot be undone" in confirm
    assert Conversation.objects.filter(pk=gone.id).exists()  # asking deletes nothing
    response = client.post(f"/c/{gone.id}/delete/", {"next": f"/c/{keep.id}/"})
    assert response["Location"] == f"/c/{keep.id}/"  # back where the person was
    assert not Conversation.objects.filter(pk=gone.id).exists()
    assert not Message.objects.filter(conversation_id=gone.id).exists()
    # Deleting the chat on screen goes to the latest other chat.
    response = client.post(f"/c/{keep.id}/delete/", {"next": f"/c/{keep.id}/"})
    assert response["Location"] == "/"
    assert not Conversation.objects.filter(pk=keep.id).exists()


def test_a_chat_with_a_live_tool_or_reply_is_not_deleted(client: Client) -> None:
    chat = _open(client)
    _say(chat, "Book a flight")
    ToolSession.objects.create(
        id="call-1", conversation=chat, tool_name="book_flight", status="awaiting_elicit"
    )
    confirm = client.get(f"/c/{chat.id}/delete/").content.decode()
    assert "a tool is still working in it (book flight)" in confirm
    assert "Delete this chat</button>" not in confirm  # nothing to click but Back
    refused = client.post(f"/c/{chat.id}/delete/")
    assert refused.status_code == 409 and "Finish or stop it first" in refused.content.decode()
    assert Conversation.objects.filter(pk=chat.id).exists()
    ToolSession.objects.filter(pk="call-1").update(status="completed")
    Conversation.objects.filter(pk=chat.id).update(
        turn_worker="host:1", turn_expires=timezone.now() + timedelta(seconds=20)
    )
    refused = client.post(f"/c/{chat.id}/delete/")
    assert refused.status_code == 409 and "still replying" in refused.content.decode()
    Conversation.objects.filter(pk=chat.id).update(turn_worker="", turn_expires=None)
    assert client.post(f"/c/{chat.id}/delete/").status_code == 302
    assert not Conversation.objects.filter(pk=chat.id).exists()


def test_only_the_owner_renames_or_deletes_and_only_with_csrf() -> None:
    other = Conversation.objects.create(owner="session:someone-else", title="Theirs")
    browser = Client(enforce_csrf_checks=True)
    page = browser.get(browser.get("/")["Location"]).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    csrf = {"csrfmiddlewaretoken": token.group(1)}
    mine = Conversation.objects.exclude(pk=other.pk).get()
    assert browser.post(f"/c/{mine.id}/rename/", {"title": "x"}).status_code == 403
    assert browser.post(f"/c/{mine.id}/delete/").status_code == 403
    for action in ("rename", "delete"):
        refused = browser.post(f"/c/{other.id}/{action}/", {**csrf, "title": "Mine now"})
        assert refused.status_code == 404
        assert "does not exist or is not yours" in refused.content.decode()
    other.refresh_from_db()
    assert other.title == "Theirs"
    assert browser.post(f"/c/{mine.id}/rename/", {**csrf, "title": "Mine"}).status_code == 302


@pytest.mark.parametrize("debug", [False, True])
def test_an_unknown_or_someone_elses_conversation_is_a_human_404(
    client: Client, settings: object, debug: bool
) -> None:
    settings.DEBUG = debug  # type: ignore[attr-defined]
    other = Conversation.objects.create(owner="session:someone-else")
    for url in (f"/c/{other.id}/", "/c/00000000-0000-0000-0000-000000000000/"):
        response = client.get(url)
        assert response.status_code == 404
        page = response.content.decode()
        assert "This conversation does not exist or is not yours" in page
        assert '<a href="/">Back to your chats</a>' in page
        assert "URLconf" not in page and "Traceback" not in page


def test_other_pages_not_found_use_the_site_404(client: Client, settings: object) -> None:
    settings.DEBUG = False  # type: ignore[attr-defined]
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    page = response.content.decode()
    assert "This page does not exist" in page and '<a href="/">Back to the chat</a>' in page
    assert 'rel="icon"' in page and "favicon" in page


def test_the_favicon_and_the_empty_state(client: Client) -> None:
    page = client.get(client.get("/")["Location"]).content.decode()
    icon = re.search(r'<link rel="icon" href="([^"]+\.svg)" type="image/svg\+xml">', page)
    assert icon is not None
    assert "book_flight" not in page.split('class="empty-chat"')[1].split("</section>")[0]
    assert "What can I help you with?" in page
    prompts = ("Book a flight from JFK to LAX", "Pick a card", "Choose a colour", "Send feedback")
    for prompt in prompts:
        assert f'name="text" value="{prompt}"><button type="submit" class="example">' in page


def _chats(owner: str, titles: list[str]) -> list[Conversation]:
    """Chats of ``owner`` with a message each, the first the newest."""
    made = []
    for title in reversed(titles):
        chat = Conversation.objects.create(owner=owner)
        _say(chat, title)
        made.append(chat)
    return made[::-1]


def _more(page: str) -> str | None:
    """The cursor of the page's "Load more chats", if it has one."""
    found = re.search(r'name="before" value="([^"]+)"><button type="submit" class="load-more', page)
    return found.group(1) if found else None


def _items(page: str) -> list[str]:
    return re.findall(r'<a id="conv-([0-9a-f-]+)"', page)


def test_sixty_chats_come_fifty_then_the_rest(client: Client) -> None:
    chat = _open(client)
    owner = chat.owner
    chat.delete()
    chats = _chats(owner, [f"Chat {n:02d}" for n in range(60)])
    first = client.get(f"/c/{chats[0].id}/").content.decode()
    assert _listed(first) == [str(c.id) for c in chats[:50]]
    before = _more(first)
    assert before is not None and ">Load more chats</button>" in first
    # With htmx: the next list items, the first of them taking the focus, and no more to load.
    rest = client.get(f"/c/{chats[0].id}/chats/?before={before}", headers={"HX-Request": "true"})
    page = rest.content.decode()
    assert _items(page) == [str(c.id) for c in chats[50:]]
    assert page.startswith(f'<li class="conv-item" id="conv-item-{chats[50].id}">')
    assert page.count("data-autofocus") == 1 and f'id="conv-{chats[50].id}"' in page
    assert _more(page) is None and "<html" not in page
    assert 'hx-swap-oob="innerHTML"' not in page  # the search's status is left alone
    # Without JavaScript: a page of its own.
    plain = client.get(f"/c/{chats[0].id}/chats/?before={before}").content.decode()
    assert "<h1>Older chats</h1>" in plain and _items(plain) == _items(page)
    assert f'<a href="/c/{chats[0].id}/">Back to the chat</a>' in plain
    # A chat moved to the top meanwhile is neither repeated nor skipped.
    _say(chats[10], "Chat 10, again")
    again = client.get(f"/c/{chats[0].id}/chats/?before={before}", headers={"HX-Request": "true"})
    assert _items(again.content.decode()) == [str(c.id) for c in chats[50:]]
    # A cursor that is not one lists nothing (and breaks nothing).
    for bad in ("x", "1_nothex", "99999999999999999999999_" + "0" * 32, "-5_" + chats[0].id.hex):
        response = client.get(f"/c/{chats[0].id}/chats/?before={bad}", headers={"HX-Request": "1"})
        assert response.status_code == 200 and _items(response.content.decode()) == []


def test_an_old_chat_opened_is_in_the_first_page_once(client: Client) -> None:
    chat = _open(client)
    owner = chat.owner
    chat.delete()
    chats = _chats(owner, [f"Chat {n:02d}" for n in range(60)])
    oldest = chats[-1]
    first = client.get(f"/c/{oldest.id}/").content.decode()
    # The open chat is listed (and marked current) though 50 newer ones come first ...
    assert _listed(first) == [str(c.id) for c in chats[:50]] + [str(oldest.id)]
    assert f'href="/c/{oldest.id}/" aria-current="page"' in first
    # ... and the next page does not list it again.
    rest = client.get(
        f"/c/{oldest.id}/chats/?before={_more(first)}", headers={"HX-Request": "true"}
    )
    assert _items(rest.content.decode()) == [str(c.id) for c in chats[50:-1]]


def test_search_finds_a_chat_by_a_word_of_its_name_and_only_the_owners(client: Client) -> None:
    chat = _open(client)
    mine = _chats(chat.owner, ["Trip to Lisbon", "Dinner in Paris", "LISBON hotels"])
    theirs = Conversation.objects.create(owner="session:someone-else")
    _say(theirs, "Lisbon, not yours")
    url = f"/c/{mine[1].id}/chats/"
    found = client.get(url, {"q": "  lisBon "}, headers={"HX-Request": "true"}).content.decode()
    assert _items(found) == [str(mine[0].id), str(mine[2].id)]
    assert str(theirs.id) not in found and "not yours" not in found
    assert '<p id="chat-list-status" hx-swap-oob="innerHTML">2 chats found.</p>' in found
    assert 'aria-current="page"' not in found  # the chat on screen is not among them
    words = client.get(url, {"q": "lisbon trip"}, headers={"HX-Request": "true"}).content.decode()
    assert _items(words) == [str(mine[0].id)]  # every word, in any order
    assert "1 chat found." in words
    none = client.get(url, {"q": "Rome"}, headers={"HX-Request": "true"}).content.decode()
    assert _items(none) == [] and "No chat has “Rome” in its name." in none
    # Cleared: the first page again, and the status emptied.
    cleared = client.get(url, {"q": ""}, headers={"HX-Request": "true"}).content.decode()
    assert _items(cleared) == [str(c.id) for c in mine]
    assert '<p id="chat-list-status" hx-swap-oob="innerHTML"></p>' in cleared
    # Without JavaScript, the same search as a page; the chat page's own sidebar is unchanged.
    plain = client.get(url, {"q": "lisbon"}).content.decode()
    assert "<h1>Chats found</h1>" in plain and 'value="lisbon"' in plain
    assert _items(plain) == [str(mine[0].id), str(mine[2].id)]
    # Someone else's chat is not a place to search from; NULs and long queries are harmless.
    assert client.get(f"/c/{theirs.id}/chats/", {"q": "Lisbon"}).status_code == 404
    odd = client.get(url, {"q": "Lis\x00bon" + "x" * 500}, headers={"HX-Request": "true"})
    assert odd.status_code == 200 and _items(odd.content.decode()) == []
    # "New chat" is a placeholder, not a name: the empty chat on screen is not found by it.
    empty = client.get(f"/c/{chat.id}/chats/", {"q": "new"}, headers={"HX-Request": "true"})
    assert _items(empty.content.decode()) == []


def test_the_chat_page_offers_the_search_and_a_page_of_chats(client: Client) -> None:
    chat = _open(client)
    _say(chat, "Book a flight")
    page = client.get(f"/c/{chat.id}/").content.decode()
    form = re.search(r'<form class="chat-search" role="search".*?</form>', page, re.S)
    assert form is not None
    assert f'action="/c/{chat.id}/chats/"' in form.group(0)  # works without JavaScript
    assert f'hx-get="/c/{chat.id}/chats/" hx-target="#conversation-list"' in form.group(0)
    assert '<label class="visually-hidden" for="chat-search">Search chats</label>' in form.group(0)
    assert '<span class="visually-hidden">Search</span></button>' in form.group(0)
    assert '<p class="chat-list-status" id="chat-list-status" role="status"></p>' in page
    assert _more(page) is None  # one chat: nothing more to load
    assert f'<li class="conv-item conv-current" id="conv-item-{chat.id}">' in page
