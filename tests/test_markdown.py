"""The assistant's Markdown: rendered by markdown-it-py, sanitised by nh3, links made safe."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from chatbridge.chat.markdown import render_markdown
from chatbridge.chat.rendering import SocketView, render_event
from chatbridge.engine.protocol import AssistantDelta, AssistantMessage, UserMessage
from chatbridge.records.models import Conversation, Message


def test_bold_code_lists_blocks_tables_and_strikethrough() -> None:
    html = render_markdown(
        "Here is **bold**, `code` and ~~old~~.\n\n- one\n- two\n\n1. first\n2. second\n\n"
        "```python\nprint('hi')\n```\n\n| Flight | Price |\n|---|--:|\n| CB101 | $199 |"
    )
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert "<s>old</s>" in html
    assert "<ul>\n<li>one</li>" in html and "<ol>\n<li>first</li>" in html
    assert "<pre><code>print('hi')\n</code></pre>" in html
    assert "<th>Flight</th>" in html and '<td class="align-right">$199</td>' in html
    # Alignment is a class: the chat's Content-Security-Policy allows no inline style.
    assert '<th class="align-right">Price</th>' in html and "style=" not in html


def test_headings_keep_the_page_outline() -> None:
    html = render_markdown("# Trip\n\n### Flights\n\nText\n\n###### Fine print")
    assert html == "<h2>Trip</h2>\n<h2>Flights</h2>\n<p>Text</p>\n<h2>Fine print</h2>\n"


def test_line_breaks_are_kept() -> None:
    assert render_markdown("one\ntwo") == "<p>one<br>\ntwo</p>\n"


def test_links_open_safely_and_only_to_web_and_mail_addresses() -> None:
    html = render_markdown(
        "[site](https://example.org/a?b=1) [mail](mailto:a@example.org) <https://auto.example>"
    )
    links = re.findall(r"<a [^>]*>", html)
    assert len(links) == 3
    for link in links:
        assert 'target="_blank"' in link and 'rel="noopener noreferrer nofollow"' in link
    for hostile in (
        "[j](javascript:alert(1))",
        "[j](JaVaScRiPt:alert(1))",
        "[d](data:text/html,<script>alert(1)</script>)",
        "[v](vbscript:msgbox)",
        "[r](/admin/)",
        "<javascript:alert(1)>",
    ):
        assert "href" not in render_markdown(hostile), hostile


def test_raw_html_from_the_model_stays_text() -> None:
    html = render_markdown(
        '<script>alert("s")</script> <img src=x onerror=alert(1)> '
        '<a href="javascript:alert(1)">j</a> <b onclick="x()">b</b>\n\n<div>block</div>'
    )
    assert "<script" not in html and "<img" not in html and "<a " not in html
    assert "<b" not in html and "<div" not in html and "onerror=" in html  # as text
    assert "&lt;script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_images_are_links_not_loaded() -> None:
    html = render_markdown("![tracker](https://evil.example/pixel.png)")
    assert "<img" not in html
    assert 'href="https://evil.example/pixel.png"' in html


def test_a_streamed_reply_is_markdown_as_it_comes_and_the_final_message_too() -> None:
    view = SocketView()
    first = render_event(AssistantDelta(message_id="m1", delta="**Hi"), view)
    assert first is not None and "<p><strong>Hi</strong></p>" in first and "**" not in first
    more = render_event(AssistantDelta(message_id="m1", delta="** <b>x</b>"), view)
    assert more is not None and "&lt;b&gt;x&lt;/b&gt;" in more and "<b>" not in more
    final = render_event(AssistantMessage(message_id="m1", content="**Hi** <b>x</b>"), view)
    assert final is not None and 'hx-swap-oob="true"' in final
    assert "<strong>Hi</strong> &lt;b&gt;x&lt;/b&gt;" in final
    assert view.streams == {}  # the reply is written: nothing of it is kept


def test_user_messages_stay_plain_text() -> None:
    message = UserMessage(message_id="u1", content="**not bold**\n<i>x</i>")
    html = render_event(message, SocketView())
    assert html is not None
    assert "**not bold**<br>&lt;i&gt;x&lt;/i&gt;" in html and "<strong>" not in html


@pytest.mark.django_db
def test_the_transcript_after_a_reload_renders_the_same(client: Client) -> None:
    location = client.get("/")["Location"]
    conversation = Conversation.objects.get(pk=location.split("/")[2])
    Message.objects.create(
        id="u", conversation=conversation, seq=1, role="user", content="**mine** [x](https://a.b)"
    )
    Message.objects.create(
        id="a",
        conversation=conversation,
        seq=2,
        role="assistant",
        content="**Booked.** See [the airline](https://airline.example). <script>x()</script>",
    )
    page = client.get(location).content.decode()
    assert "**mine** [x](https://a.b)" in page  # the user's text as typed
    assert "<strong>Booked.</strong>" in page
    assert (
        '<a href="https://airline.example" target="_blank" rel="noopener noreferrer nofollow">'
        in page
    )
    assert "<script>x()" not in page and "&lt;script&gt;x()&lt;/script&gt;" in page
    final = render_event(
        AssistantMessage(message_id="a", content=conversation.messages.get(id="a").content),
        SocketView(),
    )
    assert final is not None
    bubble = re.search(r'<div class="bubble markdown" id="msg-a-text">.*?</div>', page, re.S)
    assert bubble is not None and bubble.group(0) in final  # live and reloaded alike
