"""A reply as Markdown while it streams (chat/markdown_stream.py, chat/streaming.py): what is
half-written renders sensibly, finished blocks are sent once, hostile text is sanitised as at
the end, and the last streamed render is the final render."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup, Tag

from chatbridge.chat.markdown import render_markdown
from chatbridge.chat.markdown_stream import Append, MarkdownStream, Redraw, Replace, heal
from chatbridge.chat.rendering import SocketView, render_event
from chatbridge.engine.protocol import AssistantDelta, AssistantMessage
from tests.markdown_plugin import DESCRIPTION
from tests.test_browser_security import HOSTILE as HOSTILE_MARKUP
from tests.test_rendering import HOSTILE as HOSTILE_IMG

REPLIES = [
    DESCRIPTION,
    "Plain words, one line.\nAnother line, then the end.",
    "- a\n\n- b\n\n- c\n\nAfter a loose list.\n\n1. x\n2. y\n\n3) z",
    "Title\n===\n\nText\n\n***\n\n> quoted *words*\n> more\n\n    indented code\n\nEnd.",
    "Intro\n| a | b |\n|---|---|\n| 1 | 2 |\n\nA [link](https://example.org/a?b=1&c=2).",
    "A reference [foo] first.\n\n[foo]: https://example.org\n\nAnd after it.",
]
HOSTILE_LINKS = "[j](javascript:alert(1)) [d](data:text/html,x) [v](vbscript:x) [r](/admin/)"
HOSTILE_REPLY = (
    f'{HOSTILE_MARKUP}\n\n{HOSTILE_IMG} <!-- a comment --> <b onclick="x()">b</b>\n\n'
    f"**{HOSTILE_LINKS}**\n\n```\n{HOSTILE_MARKUP}\n```\n\n- {HOSTILE_IMG}\n\nThe end."
)
ALLOWED_TAGS = {"a", "blockquote", "br", "code", "del", "em", "h2", "hr", "li", "ol", "p", "pre"}
ALLOWED_TAGS |= {"s", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul"}


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def streamed(text: str, size: int) -> MarkdownStream:
    stream = MarkdownStream()
    for piece in pieces(text, size):
        stream.feed(piece)
    return stream


def render(text: str) -> str:
    return str(render_markdown(text))


def test_an_open_code_fence_shows_as_a_code_block_so_far() -> None:
    assert render(heal("Here:\n\n```python\nprint('hi')")) == (
        "<p>Here:</p>\n<pre><code>print('hi')</code></pre>\n"
    )
    assert heal("Here:\n\n``") == "Here:\n\n"  # not yet a fence: it waits
    assert render(heal("Here:\n\n```py")) == "<p>Here:</p>\n<pre><code></code></pre>\n"


def test_half_written_bold_code_and_strikethrough_are_closed_where_they_end() -> None:
    assert render(heal("Here is **bol")) == "<p>Here is <strong>bol</strong></p>\n"
    assert render(heal("Here is **")) == "<p>Here is</p>\n"  # opens nothing yet: it waits
    assert render(heal("Use `pip ins")) == "<p>Use <code>pip ins</code></p>\n"
    assert render(heal("An ~~old")) == "<p>An <s>old</s></p>\n"
    assert render(heal("**a** and *b")) == "<p><strong>a</strong> and <em>b</em></p>\n"
    assert heal("5 * 3 and snake_case") == "5 * 3 and snake_case"  # no emphasis to close


def test_a_half_written_link_shows_its_text_and_never_half_an_address() -> None:
    assert render(heal("See [the air")) == "<p>See the air</p>\n"
    assert render(heal("See [the airline]")) == "<p>See the airline</p>\n"
    assert render(heal("See [the airline](https://air")) == "<p>See the airline</p>\n"
    done = render(heal("See [the airline](https://airline.example)"))
    assert 'href="https://airline.example"' in done


def test_a_list_grows_item_by_item_without_sending_it_again() -> None:
    stream = MarkdownStream()
    assert stream.feed("- one\n- tw") is not None
    assert stream.tail == "<ul>\n<li>one</li>\n<li>tw</li>\n</ul>\n"
    assert stream.feed("o") == Append(depth=2, html="o")  # into the last item
    assert stream.feed("\n- th") == Append(depth=1, html="<li>th</li>\n")  # a new item
    assert stream.feed("\n-") is None  # a marker with no words yet waits
    assert stream.html == render("- one\n- two\n- th")


def test_a_finished_block_is_sent_once_and_never_again() -> None:
    stream = MarkdownStream()
    first = stream.feed("# Trip\n\nFirst paragraph **with bold**.\n\n")
    assert first == Replace(
        finished="<h2>Trip</h2>\n", tail="<p>First paragraph <strong>with bold</strong>.</p>\n"
    )
    second = stream.feed("Second")
    assert second == Replace(
        finished="<p>First paragraph <strong>with bold</strong>.</p>\n", tail="<p>Second</p>\n"
    )
    later = [stream.feed(piece) for piece in pieces(" paragraph, *growing* on.\n\n1. Item\n", 3)]
    assert all("First paragraph" not in str(update) for update in later)
    assert stream.finished == (
        first.finished + second.finished + "<p>Second paragraph, <em>growing</em> on.</p>\n"
    )


def test_a_table_waits_for_the_line_that_makes_it_a_table() -> None:
    stream = MarkdownStream()
    stream.feed("Prices:\n\n| Flight | Price |\n")
    assert stream.html == "<p>Prices:</p>\n"  # no raw pipes while it may become a table
    stream.feed("|---|--:|\n| CB101 | $1")
    assert stream.html.endswith(
        '<td>CB101</td>\n<td class="align-right">$1</td>\n</tr>\n</tbody>\n</table>\n'
    )


@pytest.mark.parametrize("size", [1, 4, 17])
@pytest.mark.parametrize("text", REPLIES, ids=range(len(REPLIES)))
def test_the_last_streamed_render_is_the_final_render(text: str, size: int) -> None:
    final = render(text)
    stream = MarkdownStream()
    for piece in pieces(text, size):
        stream.feed(piece)
        if "[foo]:" not in text:  # a reference definition redraws what came before it
            assert final.startswith(stream.finished)  # a finished block never changes
    assert stream.html == final


def test_a_reference_definition_redraws_the_reply() -> None:
    stream = streamed("A reference [foo] first.\n\nThen more text.\n\n", 4)
    assert isinstance(stream.feed("[foo]: https://example.org\n"), Redraw)
    assert stream.finished == "" and 'href="https://example.org"' in stream.tail


def page_after(view: SocketView, updates: list[str]) -> BeautifulSoup:
    """A transcript after ``updates`` (htmx's out-of-band swaps, applied as htmx applies them,
    through a real HTML parser and CSS selectors)."""
    page = BeautifulSoup('<div id="transcript"></div>', "html.parser")
    for update in updates:
        for swap in BeautifulSoup(update, "html.parser").find_all(recursive=False):
            assert isinstance(swap, Tag)
            how, _, where = str(swap["hx-swap-oob"]).partition(":")
            if how == "true":
                old = page.find(id=swap["id"])
                assert isinstance(old, Tag)
                old.replace_with(swap)
                continue
            target = page.select_one(where)
            assert target is not None, where
            nodes = list(swap.contents)
            if how == "innerHTML":
                target.clear()
            for node in nodes:
                if how == "beforebegin":
                    target.insert_before(node)
                else:
                    target.append(node)
    return page


def bubble_html(page: BeautifulSoup, message_id: str) -> str:
    bubble = page.find(id=f"msg-{message_id}-text")
    assert isinstance(bubble, Tag)
    for tail in bubble.select(".md-tail"):
        tail.unwrap()
    return bubble.decode_contents()


@pytest.mark.parametrize("size", [1, 5, 40])
def test_the_fragments_build_the_final_bubble_and_nothing_hostile(size: int) -> None:
    view, updates = SocketView(), []
    for piece in pieces(HOSTILE_REPLY + "\n\n" + DESCRIPTION, size):
        update = render_event(AssistantDelta(message_id="m1", delta=piece), view)
        if update is not None:
            updates.append(update)
            check_sanitised(update)
    streamed_page = page_after(view, updates)
    final = render_event(AssistantMessage(message_id="m1", content=view.streams["m1"].text), view)
    assert final is not None
    final_page = page_after(view, [*updates, final])
    assert bubble_html(streamed_page, "m1") == bubble_html(final_page, "m1")
    # Screen readers: the bubble being written is busy, never a live region; the page's one
    # polite announcement comes with the final reply (chat.js).
    assert 'aria-busy="true"' in updates[0] and "aria-busy" not in final
    assert not any("aria-live" in update for update in [*updates, final])
    assert "&lt;script&gt;" in bubble_html(final_page, "m1")


def check_sanitised(update: str) -> None:
    """Only the Markdown's tags, no script, no event handler, no address but the web's."""
    for tag in BeautifulSoup(update, "html.parser").find_all(True):
        assert isinstance(tag, Tag)
        if tag.name in ("div", "article", "span"):  # the swaps, the bubble, "Assistant:"
            continue
        assert tag.name in ALLOWED_TAGS, update
        for name, value in tag.attrs.items():
            assert name in ("href", "target", "rel", "start", "class"), update
            if name == "href":
                assert str(value).startswith(("https://", "mailto:")), update


def test_huge_input_streams_in_bounded_pieces() -> None:
    huge = ("x = 1  # <script>alert(1)</script>\n" * 3000).join(["```\n", "```\n\nDone."])
    view, largest, total = SocketView(), 0, 0
    for piece in pieces(huge, 500):
        update = render_event(AssistantDelta(message_id="m1", delta=piece), view) or ""
        check_sanitised(update)
        largest, total = max(largest, len(update)), total + len(update)
    assert "<script>" not in view.streams["m1"].html
    assert largest < 80_000  # past 64 KB of one block, only the final render shows the rest
    assert total < 6 * len(huge)


def bytes_sent(text: str, size: int) -> int:
    view, total = SocketView(), 0
    for piece in pieces(text, size):
        total += len(render_event(AssistantDelta(message_id="a" * 32, delta=piece), view) or "")
    return total


def test_the_bytes_sent_grow_with_the_reply_not_with_its_square() -> None:
    section = DESCRIPTION.split("<script>")[0]
    long, longer = section * 8, section * 16  # about 2,700 and 5,400 characters
    # Each piece of four characters (a model's token) sends what changed, not the reply.
    assert bytes_sent(long, 4) < 35 * len(long)
    assert bytes_sent(longer, 4) < 2.2 * bytes_sent(long, 4)


@pytest.mark.parametrize(
    "shown",
    ["Some **bold wor", "A `code sp", "See [the airline](https://exa", "- one\n- two\n- ", "~~old"],
)
def test_a_stopped_reply_stays_as_it_was_shown(shown: str) -> None:
    """Stopped mid-construct, the reply on record is what was shown: the page keeps showing
    it as the stream did (not its raw markers), live and after a reload."""
    from django.template.loader import render_to_string

    bubble = render_to_string(
        "chatbridge/message.html",
        {"role": "assistant", "id": "m1", "content": shown, "stopped": True},
    )
    inner = BeautifulSoup(bubble, "html.parser").select_one("#msg-m1-text")
    assert inner is not None
    assert inner.decode_contents() == streamed(shown, 3).html
    for marker in ("**", "`", "~~", "](https"):
        assert marker not in inner.get_text()
