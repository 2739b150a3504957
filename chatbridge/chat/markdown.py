"""The assistant's text as HTML: Markdown (CommonMark, tables, strikethrough) made safe.

Two maintained libraries do the work, no hand-written parsing or escaping:

- markdown-it-py parses the text as CommonMark with raw HTML turned off, so any markup the
  model writes (``<script>``, ``<img onerror=…>``) comes out as text; images are off (a
  model's image would load from anywhere), so ``![x](url)`` shows as a link;
- every heading becomes an ``h2``: the page's outline stays valid (``h1`` is the chat's title;
  a reply's ``###`` would skip a level), whatever levels the model picks;
- nh3 (ammonia) then keeps only the tags and attributes listed here, links only to
  ``http``, ``https`` and ``mailto`` URLs (``javascript:``, ``data:`` and relative URLs are
  dropped), and opens every link in a new tab with ``rel="noopener noreferrer nofollow"``;
- a table column's alignment is a class (``align-right``), not a style attribute: the chat's
  Content-Security-Policy allows no inline style.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["clean_html", "markdown_parser", "parse_markdown", "render_markdown"]

markdown_parser = (
    MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True})
    .enable(["table", "strikethrough"])
    .disable(["image"])
)

_TAGS = {
    "a",
    "blockquote",
    "br",
    "code",
    "del",
    "em",
    "h2",
    "hr",
    "li",
    "ol",
    "p",
    "pre",
    "s",
    "strong",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
}

_ALIGN_CLASSES = {"align-left", "align-center", "align-right"}
_cleaner = nh3.Cleaner(
    tags=_TAGS,
    clean_content_tags={"script", "style"},
    attributes={"a": {"href", "title"}, "ol": {"start"}},
    allowed_classes={"th": _ALIGN_CLASSES, "td": _ALIGN_CLASSES},
    url_schemes={"http", "https", "mailto"},
    url_relative="deny",
    link_rel="noopener noreferrer nofollow",
    set_tag_attribute_values={"a": {"target": "_blank"}},
    strip_comments=True,
)


def render_markdown(text: str) -> SafeString:
    """``text`` (the assistant's Markdown) as sanitised HTML, safe to put in a page."""
    return mark_safe(clean_html(parse_markdown(text)))  # noqa: S308 - sanitised by nh3


def parse_markdown(text: str, env: dict[str, Any] | None = None) -> list[Token]:
    """``text``'s block tokens, headings already ``h2`` and alignments classes (``env``, if
    given, collects the reference definitions the text makes)."""
    tokens = markdown_parser.parse(text, {} if env is None else env)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = "h2"
        elif token.type in ("th_open", "td_open") and "style" in token.attrs:
            align = str(token.attrs.pop("style")).removeprefix("text-align:")
            token.attrs["class"] = f"align-{align}"
    return tokens


def clean_html(tokens: Sequence[Token]) -> str:
    """``tokens`` (whole blocks of ``parse_markdown``) as HTML, sanitised by nh3."""
    return _cleaner.clean(markdown_parser.renderer.render(tokens, markdown_parser.options, {}))
