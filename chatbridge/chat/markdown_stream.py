"""The assistant's reply as Markdown while it streams, rendered as the final reply is.

The page shows a reply formatted from its first words. This module decides *which* Markdown to
render at each piece; the rendering itself is ``chat/markdown.py``'s (markdown-it-py, then nh3),
the same as for the final reply, so what the model writes is sanitised the same way mid-stream.

- **Finished blocks are rendered once.** A top-level block (a paragraph, a list, a table, a
  code block) is finished once the next one has started on a complete line, or on a line that
  begins with a letter (a paragraph, whatever follows); when that line has a pipe, once the
  line under it is complete too (it may head a table). Its HTML is sent once; only the
  unfinished tail is parsed and rendered at each piece, so the work and the bytes of a piece
  are bounded by the tail, not by the reply. A tail longer than ``_BIG`` characters (one huge
  code block) is rendered again only once it has grown by a quarter, and past
  ``_LIVE_LIMIT`` not at all: the final render shows the rest.
- **The tail is healed, by its Markdown only**, and only at the end of its last line: an
  opened ``**``, ``_``, ``~~`` or `` ` `` is closed (bold shows as it is written), markers
  that open nothing yet wait, a link shows as its text until its address is complete (never a
  link to half an address), a last line with no words yet (``-``, ``1.``, ``##``,
  ```` `` ````, ``|``) waits for them, and table rows wait for the line that makes them a
  table. An open code fence needs nothing: CommonMark ends it with the text, so it shows as a
  code block so far. The healed text then goes through the same parser and sanitiser.
- **A reference definition** (``[x]: https://...``) can change a block written before it: from
  the first one on, the whole reply is rendered at each piece (replies rarely have one).

For a reply that ends with no construct left open, the last render here is the final render,
byte for byte (``tests/test_markdown_stream.py`` asserts it): nothing moves when it ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from markdown_it.rules_inline import StateInline
from markdown_it.rules_inline.balance_pairs import link_pairs
from markdown_it.token import Token

from chatbridge.chat.markdown import clean_html, markdown_parser, parse_markdown

__all__ = ["Append", "MarkdownStream", "Redraw", "Replace", "StreamUpdate", "heal"]

_BIG = 2000  # characters of tail rendered at every piece; past it, each time a quarter more
_LIVE_LIMIT = 65536  # characters of tail past which only the final render shows the rest
# A last line with no words yet: list, quote, heading, fence, table and rule markers.
_WORDLESS = re.compile(
    r"[ \t]*(?:(?:[>*+-]|\d{1,9}[.)])[ \t]+)*(?:[-*+#=|`~_:>]+|\d{1,9}[.)]?)?[ \t]*"
)
_LETTER = re.compile(r"[^\W\d_]")
_TABLE_ROW = re.compile(r" {0,3}\|")
_TAG = re.compile(r"<(/?)([a-z][a-z0-9]*)[^>]*>")
_VOID = {"br", "hr"}
_TABLE_PARTS = {"thead", "tbody", "tr", "th", "td"}
_CLOSING_TAGS = re.compile(r"(?:</[a-z][a-z0-9]*>\s*)+\Z")
_LINK_ADDRESS = re.compile(r"\[([^\[\]\n]*)\]\([^()\s]*\Z")  # [text](https://exa
_LINK_TEXT = re.compile(r"\[([^\[\]\n]*)\]?\Z")  # [text or [text]


@dataclass(frozen=True)
class Append:
    """HTML (text, or whole elements) to add at the end of the tail's last element
    ``depth`` elements down (each the last element of the one before)."""

    depth: int
    html: str
    kind: Literal["append"] = "append"


@dataclass(frozen=True)
class Replace:
    """Blocks just finished (their HTML goes before the tail; "" if none) and the new tail."""

    finished: str
    tail: str
    kind: Literal["replace"] = "replace"


@dataclass(frozen=True)
class Redraw:
    """The whole reply again, all of it in the tail (after a reference definition)."""

    tail: str
    kind: Literal["redraw"] = "redraw"


StreamUpdate = Append | Replace | Redraw


@dataclass
class MarkdownStream:
    """One reply being written: its text so far and what the page shows of it."""

    text: str = ""
    _start: int = 0  # where the unfinished tail starts in ``text``
    _finished: list[str] = field(default_factory=list)
    _tail: str = ""
    _rendered: int = 0  # characters of tail at its last render
    _whole: bool = False  # a reference definition was seen: every render is of all the text

    @property
    def html(self) -> str:
        """The bubble's content as the page shows it now."""
        return self.finished + self._tail

    @property
    def finished(self) -> str:
        """The HTML of the blocks that will not change."""
        return "".join(self._finished)

    @property
    def tail(self) -> str:
        """The HTML of the rest, rendered again as it is written."""
        return self._tail

    def feed(self, delta: str) -> StreamUpdate | None:
        """Take the next piece of text; what the page must change (None: nothing)."""
        self.text += delta
        source = self.text[self._start :]
        if len(source) > _BIG and (
            len(source) - self._rendered < len(source) // 4 or len(source) > _LIVE_LIMIT
        ):
            return None
        if self._whole:
            return self._redraw()
        env: dict[str, Any] = {}
        tokens = parse_markdown(source, env)
        if env.get("references"):
            self._whole, self._start, self._finished = True, 0, []
            return self._redraw()
        finished = ""
        cut = _first_unfinished(source, tokens)
        if cut is not None:
            index, line = cut
            finished = clean_html(tokens[:index])
            self._finished.append(finished)
            self._start += _line_offset(source, line)
            source = self.text[self._start :]
            return self._show(finished, source, None)
        return self._show(finished, source, tokens)

    def _redraw(self) -> Redraw | None:
        tail = render_tail(self.text)
        self._rendered = len(self.text)
        if tail == self._tail:
            return None
        self._tail = tail
        return Redraw(tail)

    def _show(self, finished: str, source: str, tokens: list[Token] | None) -> StreamUpdate | None:
        old, self._tail, self._rendered = self._tail, render_tail(source, tokens), len(source)
        if finished:
            return Replace(finished, self._tail)
        if self._tail == old:
            return None
        return _appended(old, self._tail) or Replace("", self._tail)


def render_tail(source: str, tokens: list[Token] | None = None) -> str:
    """The unfinished end of a reply as HTML: healed, then rendered as the final reply is
    (``tokens``: ``source`` parsed already, if it was)."""
    healed, tokens = _healed(source, tokens)
    return clean_html(parse_markdown(healed) if tokens is None else tokens)


def _first_unfinished(source: str, tokens: list[Token]) -> tuple[int, int] | None:
    """The token index and line of the first block that may still change, if any block before
    it is finished."""
    complete = source.count("\n")  # lines 0 .. complete - 1 end with a newline
    starts = [
        (n, token.map[0])
        for n, token in enumerate(tokens)
        if token.level == 0 and token.nesting >= 0 and token.map is not None
    ]
    lines = source.split("\n")
    for n, line in reversed(starts[1:]):
        if "|" in lines[line]:
            # It may head a table: the line under it says (and a table can end a paragraph
            # without a blank line), so that line must be complete too.
            finished = line + 1 < complete
        else:  # complete, or a paragraph already: a letter first is no list item, no block
            finished = line < complete or _LETTER.match(lines[line]) is not None
        if finished:
            return n, line
    return None


def _line_offset(source: str, line: int) -> int:
    offset = 0
    for _ in range(line):
        offset = source.index("\n", offset) + 1
    return offset


def _appended(old: str, new: str) -> Append | None:
    """``new`` as HTML added at the end of one of the last elements of ``old``, if it is only
    that: text in the innermost one, or whole elements (a list item) further out."""
    closing = _CLOSING_TAGS.search(old)
    if closing is None or len(new) <= len(old):
        return None
    for cut in (m.start() for m in re.finditer("</", old[closing.start() :])):
        head, tags = old[: closing.start() + cut], old[closing.start() + cut :]
        if new.startswith(head) and new.endswith(tags):
            added = new[len(head) : len(new) - len(tags)]
            if _balanced(added):
                return Append(tags.count("</"), added)
    return None


def _balanced(html: str) -> bool:
    """Whether ``html`` is text and whole elements, and none that only a table may hold (a
    row parsed on its own is not a row)."""
    depth = 0
    for tag in _TAG.finditer(html):
        name = tag.group(2)
        if name in _TABLE_PARTS:
            return False
        if name not in _VOID:
            depth += -1 if tag.group(1) else 1
            if depth < 0:
                return False
    return depth == 0


def heal(source: str) -> str:
    """``source`` (the unfinished end of a reply) with what is half-written held back or closed,
    so that it renders as it will once written. Only the end of the text changes."""
    return _healed(source, None)[0]


def _healed(source: str, tokens: list[Token] | None) -> tuple[str, list[Token] | None]:
    """``heal(source)``, and its tokens when they are at hand (``tokens``: ``source``'s)."""
    head, newline, last = source.rpartition("\n")
    if last and _WORDLESS.fullmatch(last):
        source, tokens = head + newline, None  # the line waits for its words
    tokens = parse_markdown(source) if tokens is None else tokens
    held = _without_table_rows(source, tokens)
    if held != source:
        source, tokens = held, parse_markdown(held)
    inline = _open_inline(source, tokens)
    if inline is None:
        return source, tokens
    closed = _close_inline(source, inline.content)
    return closed, tokens if closed == source else None


def _without_table_rows(source: str, tokens: list[Token]) -> str:
    """``source`` without the lines ending its last paragraph that begin with ``|``: table rows
    whose delimiter row has not come yet."""
    if len(tokens) < 3 or tokens[-1].type != "paragraph_close" or tokens[-1].level != 0:
        return source
    first, end = tokens[-3].map or (0, 0)
    lines = source.split("\n")
    cut = end
    while cut > first and _TABLE_ROW.match(lines[cut - 1]):
        cut -= 1
    return source if cut == end else "\n".join(lines[:cut]) + ("\n" if cut else "")


def _open_inline(source: str, tokens: list[Token]) -> Token | None:
    """The text (an ``inline`` token) being written at the end of ``source``, if any: the last
    one, with nothing after it but the ends of its blocks, on the last line."""
    for n in range(len(tokens) - 1, -1, -1):
        token = tokens[n]
        if token.type == "inline":
            break
        if token.nesting != -1:
            return None  # a code block, a rule: no text being written
    else:
        return None
    lines = source.count("\n") + (0 if source.endswith("\n") else 1)
    content = token.content.rstrip()
    if token.map is None or token.map[1] != lines or not content:
        return None  # a blank line ended it
    if not source.rstrip().endswith(content.rpartition("\n")[2]):
        return None  # a finished table cell
    return token


def _close_inline(source: str, content: str) -> str:
    """``source`` whose last text, ``content``, has its open code span, link or emphasis on the
    line being written closed (or, just opened with nothing in it, held back)."""
    body = source.rstrip()
    text, trail = content.rstrip(), source[len(body) :]
    code = _open_code(text)
    if code is not None:
        at, run = code
        return (body[: -len(run)] if at + len(run) == len(text) else body + run) + trail
    for edit in (_close_link, _close_emphasis):
        drop, add = edit(text)
        text = text[: len(text) - drop] + add
        body = body[: len(body) - drop] + add
    return body + trail


def _open_code(text: str) -> tuple[int, str] | None:
    """Where a code span opens in ``text`` that nothing closes yet, and its backticks."""
    runs = [(m.start(), m.group()) for m in re.finditer(r"`+", text)]
    n = 0
    while n < len(runs):
        at, run = runs[n]
        close = next((k for k in range(n + 1, len(runs)) if runs[k][1] == run), None)
        if close is None:
            return at, run
        n = close + 1
    return None


def _close_link(text: str) -> tuple[int, str]:
    """(characters to drop from the end, text to add): ``[a``, ``[a]`` and ``[a](https://x``
    show as ``a`` until they are a link (never a link to half an address)."""
    address = _LINK_ADDRESS.search(text)
    if address is not None:
        return len(address.group()), address.group(1)
    label = _LINK_TEXT.search(text)
    if label is not None and not text[: label.start()].endswith(("\\", "!")):
        return len(label.group()), label.group(1)
    return 0, ""


def _close_emphasis(text: str) -> tuple[int, str]:
    """(characters to drop from the end, closers to add): emphasis and strikethrough opened on
    the line being written and not closed are closed; markers at its very end, opening nothing
    yet, wait. markdown-it's own scan finds the delimiters and pairs them."""
    state = StateInline(text.rpartition("\n")[2], markdown_parser, {}, [])
    markdown_parser.inline.tokenize(state)
    link_pairs(state)
    delimiters = state.delimiters
    paired = {n for n, d in enumerate(delimiters) if d.end >= 0}
    paired |= {d.end for d in delimiters if d.end >= 0}
    by_token = {d.token: n for n, d in enumerate(delimiters)}
    drop, last = 0, len(state.tokens) - 1
    while last in by_token and by_token[last] not in paired:
        drop += len(state.tokens[last].content)
        last -= 1
    closers = [
        "~~" if d.marker == 0x7E else chr(d.marker)
        for n, d in enumerate(delimiters)
        if d.open and not d.close and n not in paired and d.token <= last
    ]
    return drop, "".join(reversed(closers))
