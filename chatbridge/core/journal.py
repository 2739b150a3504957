"""The journal of a tool call: every capability result, in ``seq`` order, for replay.

A tool is resumable by replay (DESIGN §2): run it again from the start with the journal, and
each capability call whose ``seq`` is recorded returns the record instead of acting; a call
whose kind or key differs from the record raises ``ReplayDivergence``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_core import PydanticSerializationError, to_jsonable_python

from chatbridge.core.exceptions import NotSerializable, ReplayDivergence

__all__ = ["EntryKind", "Journal", "JournalEntry", "to_json_value"]

EntryKind = Literal["elicit", "sample", "step"]
_KINDS: tuple[EntryKind, ...] = ("elicit", "sample", "step")


def to_json_value(value: object, what: str) -> Any:
    """``value`` as plain JSON data (pydantic models become dicts), or ``NotSerializable``."""
    try:
        plain = to_jsonable_python(value)
        # A round trip through text gives exactly what a replay from storage will return.
        return json.loads(json.dumps(plain, allow_nan=False))
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise NotSerializable(what, value, str(exc)) from None


@dataclass(frozen=True)
class JournalEntry:
    """One recorded capability result."""

    seq: int
    kind: EntryKind
    key: str
    result: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "kind": self.kind, "key": self.key, "result": self.result}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JournalEntry:
        """Parse a stored entry, with a clear error for anything malformed."""
        seq, kind, key, result = (data.get(f) for f in ("seq", "kind", "key", "result"))
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise ValueError(f"journal entry seq must be a positive integer, got {seq!r}")
        if kind not in _KINDS:
            raise ValueError(f"journal entry kind must be one of {_KINDS}, got {kind!r}")
        if not isinstance(key, str) or not isinstance(result, dict):
            raise ValueError(f"journal entry {seq} needs a string key and an object result")
        return cls(seq, kind, key, result)

    def describe(self) -> str:
        return f"{self.kind} {self.key!r}"


class Journal:
    """A call's journal: recorded entries plus the replay cursor of the current run."""

    def __init__(self, tool: str, entries: Iterable[JournalEntry | Mapping[str, Any]] = ()):
        self._tool = tool
        self._entries: dict[int, JournalEntry] = {}
        for raw in entries:
            entry = raw if isinstance(raw, JournalEntry) else JournalEntry.from_dict(raw)
            if entry.seq in self._entries:
                raise ValueError(f"journal has two entries with seq {entry.seq}")
            self._entries[entry.seq] = entry
        self._replay_until = max(self._entries, default=0)
        self._next_seq = 1

    def next_seq(self) -> int:
        """Reserve the seq of the next capability call."""
        seq = self._next_seq
        self._next_seq += 1
        return seq

    @property
    def replaying(self) -> bool:
        """True while recorded calls lie ahead: events of this stretch are not re-emitted."""
        return self._next_seq <= self._replay_until

    def recorded(self, seq: int, kind: EntryKind, key: str) -> JournalEntry | None:
        """The record for call ``seq`` if there is one; divergence raises."""
        entry = self._entries.get(seq)
        if entry is not None and (entry.kind, entry.key) != (kind, key):
            raise ReplayDivergence(self._tool, seq, entry.describe(), f"{kind} {key!r}")
        return entry

    def record(self, seq: int, kind: EntryKind, key: str, result: dict[str, Any]) -> JournalEntry:
        entry = JournalEntry(seq, kind, key, result)
        self._entries[seq] = entry
        return entry

    def entries(self) -> list[JournalEntry]:
        return [self._entries[s] for s in sorted(self._entries)]

    def to_list(self) -> list[dict[str, Any]]:
        """JSON-serialisable entries in ``seq`` order."""
        return [e.to_dict() for e in self.entries()]

    def __len__(self) -> int:
        return len(self._entries)
