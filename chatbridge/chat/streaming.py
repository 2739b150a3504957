"""The socket's fragments for a reply being written: its bubble, then only what changes in it.

The bubble of a reply being written holds the blocks already finished, then its tail,
``<div class="md-tail" id="msg-<id>-tail">`` (``display: contents``: it adds no box, so the
reply lays out as the final one will). Each piece of the reply becomes at most two out-of-band
swaps (``chat/markdown_stream.py`` says which):

- text added at the end of the tail's last element: ``beforeend`` into it;
- blocks just finished: ``beforebegin`` the tail, once; and the tail's new HTML: ``innerHTML``;
- the whole reply again (a reference definition): ``innerHTML`` of the bubble.

Nothing above the tail is sent again, and nothing the person reads moves.
"""

from __future__ import annotations

from django.template.loader import render_to_string
from django.utils.safestring import mark_safe
from django_htmx.http import SwapMethod

from chatbridge.chat.markdown_stream import Append, MarkdownStream, Redraw, Replace
from chatbridge.engine.protocol import AssistantDelta

__all__ = ["oob", "reply_piece"]


def oob(swap: SwapMethod, target: str, inner: str) -> str:
    """``inner`` swapped out of band into the element ``target`` (a CSS selector) by ``swap``,
    one of htmx's swap methods as django-htmx types them."""
    return f'<div hx-swap-oob="{swap}:{target}">{inner}</div>'


def _tail(message_id: str, html: str) -> str:
    return f'<div class="md-tail" id="msg-{message_id}-tail">{html}</div>'


def reply_piece(event: AssistantDelta, streams: dict[str, MarkdownStream], *, shown: bool) -> str:
    """The fragment for ``event`` on a page that shows the replies of ``streams`` (``shown``:
    the page has this reply's bubble); "" when the page need not change."""
    message_id = event.message_id
    stream = streams.get(message_id)
    if stream is None:
        streams.clear()  # one reply is written at a time: one that never ended is over
        stream = streams[message_id] = MarkdownStream()
        stream.feed(event.delta)
        if shown:  # its bubble, from a stream this socket no longer has: drawn again
            html = stream.finished + _tail(message_id, stream.tail)
            return oob("innerHTML", f"#msg-{message_id}-text", html)
        item = render_to_string(
            "chatbridge/message.html",
            {
                "role": "assistant",
                "id": message_id,
                "streaming": True,
                # Sanitised by chat/markdown.py:
                "finished": mark_safe(stream.finished),  # noqa: S308
                "tail": mark_safe(stream.tail),  # noqa: S308
            },
        )
        return oob("beforeend", "#transcript", item)
    match stream.feed(event.delta):
        case None:
            return ""
        case Append(depth=depth, html=html):
            return oob("beforeend", f"#msg-{message_id}-tail" + " > :last-child" * depth, html)
        case Replace(finished=finished, tail=tail):
            before = oob("beforebegin", f"#msg-{message_id}-tail", finished) if finished else ""
            return before + oob("innerHTML", f"#msg-{message_id}-tail", tail)
        case Redraw(tail=tail):
            return oob("innerHTML", f"#msg-{message_id}-text", _tail(message_id, tail))
