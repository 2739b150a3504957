r"""A message as tokens, and the readers the offline model fills arguments with: ``key: value``,
``from A to B``, the subject after ``for``, the first sentence.

The offline model runs synchronously on the server's event loop, on text any visitor can send,
so every step must be linear in the size of its input: a slow reply freezes every socket, HTTP
request and MCP call of the process. Regular expressions with a quantifier followed by something
that can fail (a lazy value before a lookahead, ``\s+`` before an alternation) backtracked
cubically on runs of whitespace: ``"origin:" + 700 spaces + "a\nb"`` took 9 s. So a message is
cut into tokens once, by an expression whose alternatives are disjoint runs of one character
class (nothing follows a run, so nothing backtracks; the only other expressions are such runs
too), and the readers below walk that token list forwards: where a reader gives up, its next try
starts at or after that point, never over the same tokens again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cached_property

__all__ = ["MessageText", "clean_value", "key_tokens"]

_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")  # a word, a whitespace run, or one other character
# A value ends before one of these, a line break, or whitespace and then one of the stop words.
_VALUE_ENDS = frozenset(",.;!?")
_STOP_WORDS = frozenset(
    ("on", "at", "for", "with", "in", "by", "tomorrow", "today", "and", "please")
)
_SENTENCE_ENDS = frozenset(".!?")
_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")  # as str.splitlines()


class MessageText:
    """A message as tokens, with what the readers need to know about each, found in one pass."""

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = _TOKEN.findall(text)
        self.folded = [t.lower() for t in self.tokens]
        self.space = [t[0].isspace() for t in self.tokens]
        self.line_break = [
            s and not _LINE_BREAKS.isdisjoint(t)
            for s, t in zip(self.space, self.tokens, strict=True)
        ]
        self.positions: dict[str, list[int]] = {}
        for i, word in enumerate(self.folded):
            if not self.space[i]:
                self.positions.setdefault(word, []).append(i)
        # stop[i]: the first token at or after i that a value cannot include.
        count = len(self.tokens)
        self.stop = [count] * (count + 1)
        for i in range(count - 1, -1, -1):
            self.stop[i] = i if self._ends_value(i) else self.stop[i + 1]

    def _ends_value(self, i: int) -> bool:
        if self.tokens[i] in _VALUE_ENDS:
            return True
        if not self.space[i]:
            return False
        return self.line_break[i] or (
            i + 1 < len(self.tokens) and self.folded[i + 1] in _STOP_WORDS
        )

    def _starts_value(self, i: int) -> bool:
        return i < len(self.tokens) and not self.space[i] and self.tokens[i] not in _VALUE_ENDS

    def _value(self, first: int) -> str:
        """The value whose first token is ``first`` (always kept), up to where values end."""
        return clean_value("".join(self.tokens[first : self.stop[first + 1]]))

    def _after_key(self, key: Sequence[str], i: int) -> int:
        """Where ``key`` (folded tokens) ends if it starts at token ``i``, else -1."""
        if i + len(key) > len(self.tokens):
            return -1
        for j, part in enumerate(key, start=i):
            if not (self.space[j] if part[0].isspace() else self.folded[j] == part):
                return -1
        return i + len(key)

    def _after_separator(self, i: int) -> int:
        """Where ``:``, ``=`` or `` is `` starting at token ``i`` ends, else -1."""
        spaced = i < len(self.tokens) and self.space[i]
        if spaced:
            i += 1
        if i < len(self.tokens) and (
            self.tokens[i] in (":", "=") or (spaced and self.folded[i] == "is")
        ):
            return i + 1
        return -1

    def explicit(self, key: Sequence[str]) -> tuple[int, str] | None:
        """The first ``key: value``, ``key = value`` or ``key is value``: its position, value."""
        if not key or key[0][0].isspace():
            return None
        for i in self.positions.get(key[0], ()):
            j = self._after_key(key, i)
            j = self._after_separator(j) if j >= 0 else -1
            if j < 0:
                continue
            if j < len(self.tokens) and self.space[j]:
                j += 1
            # A value that cleans to nothing is quotes and spaces, where no key starts: no later
            # try reads these tokens again.
            if j < len(self.tokens) and self.tokens[j] not in (",", ";"):
                value = self._value(j)
                if value:
                    return i, value
        return None

    def subject(self) -> str:
        """What follows the first ``for`` up to the end of its sentence or line, or ""."""
        count = len(self.tokens)
        for i in self.positions.get("for", ()):
            if i + 1 < count and self.space[i + 1]:
                k = i + 2  # not a space: tokens are whole runs
                while k < count and self.tokens[k] not in _SENTENCE_ENDS and not self.line_break[k]:
                    k += 1
                # Empty only if nothing was read: tries never overlap.
                subject = " ".join("".join(self.tokens[i + 2 : k]).split())
                if subject:
                    return subject
        return ""

    def first_sentence(self) -> str:
        """The text up to the first whitespace after ``.``, ``!`` or ``?``."""
        for i in range(1, len(self.tokens)):
            if self.space[i] and self.tokens[i - 1] in _SENTENCE_ENDS:
                return "".join(self.tokens[:i])
        return "".join(self.tokens)

    @cached_property
    def route(self) -> tuple[str, str] | None:
        """The first ``from A to B``: A up to a line break or ``,.;!?``, B as any value."""
        count = len(self.tokens)
        i = 0
        while i < count:
            if not (
                self.folded[i] == "from"
                and i + 1 < count
                and self.space[i + 1]
                and self._starts_value(i + 2)
            ):
                i += 1
                continue
            k = i + 3
            while k < count and self.tokens[k] not in _VALUE_ENDS:
                if self.space[k]:
                    if (
                        k + 2 < count
                        and self.folded[k + 1] == "to"
                        and self.space[k + 2]
                        and self._starts_value(k + 3)
                    ):
                        origin = clean_value("".join(self.tokens[i + 2 : k]))
                        return origin, self._value(k + 3)
                    if self.line_break[k]:
                        break
                k += 1
            # A later "from" before k would look for the same " to " among fewer tokens and stop
            # at k too: try the next one after it.
            i = k + 1
        return None


def key_tokens(words: str) -> list[str]:
    """``words`` as the folded tokens ``MessageText.explicit`` looks for."""
    return [t.lower() for t in _TOKEN.findall(words)]


def clean_value(value: str) -> str:
    """Spaces folded, quotes stripped; a three-letter code (an airport) in capitals."""
    value = " ".join(value.split()).strip("'\"").strip()
    return value.upper() if len(value) == 3 and value.isascii() and value.isalpha() else value
