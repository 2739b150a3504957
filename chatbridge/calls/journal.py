"""The journal of a tool call: every capability result, identified by scope and position.

A tool is resumable by replay (DESIGN §2, §9): run it again from the start with the journal,
and each capability call that has a record returns it instead of acting. A call is identified
by its *scope* (the branch path: ``""`` for the tool body, ``"2"`` for its second
``ctx.branch``, ``"2.1"`` for the first branch inside that one) and its *position* within the
scope, never by the global order in which calls happened to finish: concurrent branches
replay each with its own answers. Each entry carries a digest of its request, so a changed
tool (other step arguments, another prompt) raises ``ReplayDivergence`` instead of receiving
a stale answer. ``seq`` is the global order of recording, kept for storage and display.

A journal forks when a person changes an earlier answer (``PluginSession.change``): the
entries from that question on are *abandoned* — kept, for operators, but never replayed — and
the call runs again from the start, replaying what is left and asking that question anew.
Abandoned entries keep their ``seq`` (new entries come after them) and count in the numbers of
the questions asked after them, so no question's id is ever given twice in a call.

A step's *start* is on record too, before its side effect runs (DESIGN §11): a call
interrupted between the two (a database outage, a worker killed) finds the step started and
not finished when it is replayed, and ``CallContext.step`` runs it again only with the same
idempotency key (``step_key``), never silently.

Durable recording goes through a ``JournalStore``; its failure stops the call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic_core import PydanticSerializationError, to_jsonable_python

from chatbridge.author.exceptions import NotSerializable, ReplayDivergence

if TYPE_CHECKING:
    from chatbridge.calls.sessions import PluginSession

__all__ = [
    "EntryKind",
    "Journal",
    "JournalEntry",
    "JournalStore",
    "MemoryJournalStore",
    "RAISED",
    "request_digest",
    "step_key",
    "json_value_and_text",
    "to_json_value",
]

EntryKind = Literal["elicit", "sample", "step"]
# The result on record of a step whose function raised: its error, in words. Such a step runs
# again on replay (it did not return); an entry with it is a start, never a result.
RAISED = "raised"
_KINDS: tuple[EntryKind, ...] = ("elicit", "sample", "step")
# What the digest covers, per kind: named in divergence messages.
_DIGESTED = {
    "elicit": "a different message or context",
    "sample": "a different prompt",
    "step": "different args",
}


def to_json_value(value: object, what: str) -> Any:
    """``value`` as plain JSON data (pydantic models become dicts), or ``NotSerializable``."""
    return json_value_and_text(value, what)[0]


def json_value_and_text(value: object, what: str) -> tuple[Any, str]:
    """``value`` as plain JSON data and as the JSON text of it, or ``NotSerializable``: a
    round trip through text gives exactly what a replay from storage will return, and the text
    is what storage keeps (``JournalEntry.text``: made once, not again by the record)."""
    try:
        text = json.dumps(to_jsonable_python(value), allow_nan=False)
        return json.loads(text), text
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise NotSerializable(what, value, str(exc)) from None


def step_key(call_id: str, seq: int) -> str:
    """The idempotency key of the step recorded at ``seq`` of call ``call_id``: the same on
    every run of that step (a replay of a step that started reuses its ``seq``), another for
    any other step, including one run again at the same place after an answer changed."""
    return f"{call_id}:{seq}"


def _stable(value: object) -> str:
    # repr() may hold a memory address; a type name is the same on every run.
    return f"<{type(value).__qualname__}>"


def request_digest(request: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a capability request (sorted keys, no spaces)."""
    plain = to_jsonable_python(dict(request), fallback=_stable)
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class JournalEntry:
    """One recorded capability result, at position ``pos`` of branch path ``scope``.

    ``digest`` is ``None`` only for entries stored before scopes existed (see ``Journal``).
    ``text``: the JSON text of ``result`` when it was made already (a step's result is turned
    to text to be checked), for the record to keep as it is.
    """

    seq: int
    kind: EntryKind
    key: str
    result: dict[str, Any]
    scope: str = ""
    pos: int | None = None
    digest: str | None = None
    text: str | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "seq": self.seq,
            "kind": self.kind,
            "key": self.key,
            "result": self.result,
        }
        if self.pos is not None:
            data.update(scope=self.scope, pos=self.pos, digest=self.digest)
        return data

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
        scope, pos, digest = data.get("scope", ""), data.get("pos"), data.get("digest")
        if pos is None:
            return cls(seq, kind, key, result)
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 1:
            raise ValueError(f"journal entry {seq} pos must be a positive integer, got {pos!r}")
        if not isinstance(scope, str) or not (digest is None or isinstance(digest, str)):
            raise ValueError(f"journal entry {seq} needs a string scope and digest")
        return cls(seq, kind, key, result, scope, pos, digest)

    def describe(self) -> str:
        return f"{self.kind} {self.key!r}"


_NOTHING_UNCONSUMED: frozenset[tuple[str, int]] = frozenset()


class Journal:
    """A call's journal: recorded entries by (scope, position), and what replay consumed.

    Entries stored before scopes existed (only ``seq``/``kind``/``key``/``result``) still
    load: they are taken as the tool body's entries, at positions 1, 2, … in ``seq`` order,
    and replayed without a digest check (they have none). A branch's call in such a journal
    was recorded at the root and is not found in its branch, so it runs again.
    """

    __slots__ = (  # one per call: no dict
        "_abandoned",
        "_asking",
        "_entries",
        "_last_seq",
        "_started",
        "_tool",
        "_unconsumed",
    )

    def __init__(self, tool: str, entries: Iterable[JournalEntry | Mapping[str, Any]] = ()):
        self._tool = tool
        self._entries: dict[tuple[str, int], JournalEntry] = {}
        # The ``seq`` of each abandoned question (a fork's), ascending; () while none is.
        self._abandoned: tuple[int, ...] = ()
        self._asking: int | None = None  # the seq of the question asked and not answered yet
        # Steps whose start is on record and whose result is not (an interrupted run's), by
        # slot; their ``result`` is empty. Most journals have none: no dict each.
        self._started: dict[tuple[str, int], JournalEntry] | None = None
        seqs: set[int] = set()
        kept: list[JournalEntry | Mapping[str, Any]] = []
        questions: list[int] = []
        started: list[JournalEntry] = []
        for raw in entries:
            if isinstance(raw, Mapping) and raw.get("abandoned"):
                seq = _abandoned_seq(raw)
                seqs.add(seq)
                if raw.get("kind") == "elicit":
                    questions.append(seq)
            elif isinstance(raw, Mapping) and raw.get("started"):
                started.append(_started_entry(raw))
            else:
                kept.append(raw)
        if questions:
            self._abandoned = tuple(sorted(questions))
        parsed = [e if isinstance(e, JournalEntry) else JournalEntry.from_dict(e) for e in kept]
        legacy = sorted((e for e in parsed if e.pos is None), key=lambda e: e.seq)
        for entry in legacy:
            root = 1 + sum(1 for scope, _ in self._entries if scope == "")
            self._add(JournalEntry(entry.seq, entry.kind, entry.key, entry.result, "", root), seqs)
        for entry in parsed:
            if entry.pos is not None:
                self._add(entry, seqs)
        for entry in started:
            self._add_started(entry, seqs)
        # A new call's journal is empty: one shared empty frozenset, not a set of its own
        # (``frozenset()`` makes a new one each time since Python 3.10: 216 bytes a call).
        self._unconsumed: set[tuple[str, int]] | frozenset[tuple[str, int]] = (
            set(self._entries) if self._entries else _NOTHING_UNCONSUMED
        )
        self._last_seq = max(seqs, default=0)

    def _add(self, entry: JournalEntry, seqs: set[int]) -> None:
        assert entry.pos is not None
        if entry.seq in seqs:
            raise ValueError(f"journal has two entries with seq {entry.seq}")
        if (entry.scope, entry.pos) in self._entries:
            raise ValueError(
                f"journal has two entries at position {entry.pos} of scope {entry.scope!r}"
            )
        seqs.add(entry.seq)
        self._entries[(entry.scope, entry.pos)] = entry

    def _add_started(self, entry: JournalEntry, seqs: set[int]) -> None:
        assert entry.pos is not None
        if entry.seq in seqs:
            raise ValueError(f"journal has two entries with seq {entry.seq}")
        slot = (entry.scope, entry.pos)
        if slot in self._entries:  # finished after all: its result is what counts
            return
        seqs.add(entry.seq)
        if self._started is None:
            self._started = {}
        self._started[slot] = entry

    @property
    def replaying(self) -> bool:
        """True while recorded calls remain unconsumed: their events are not re-emitted."""
        return bool(self._unconsumed)

    def next_seq(self, *, question: bool = False) -> int:
        """Reserve the global recording order of a live capability call (``question``: a
        question's, which counts as asked if the journal forks before its answer)."""
        self._last_seq += 1
        if question:
            self._asking = self._last_seq
        return self._last_seq

    def question_number(self, ordinal: int, seq: int | None) -> int:
        """The number in the id of the ``ordinal``-th question the tool asks (on record at
        ``seq``, or None: asked now): its ordinal, plus the abandoned questions before it."""
        if not self._abandoned:
            return ordinal
        if seq is None:
            return ordinal + len(self._abandoned)
        return ordinal + sum(1 for s in self._abandoned if s < seq)

    def fork(self, seq: int) -> list[JournalEntry]:
        """Abandon the entries from ``seq`` on (and a question asked since, unanswered): the
        call replays from the start without them. The abandoned entries, in ``seq`` order."""
        gone = sorted((e for e in self._entries.values() if e.seq >= seq), key=lambda e: e.seq)
        for entry in gone:
            del self._entries[(entry.scope, entry.pos or 0)]
        if self._started:
            self._started = {s: e for s, e in self._started.items() if e.seq < seq} or None
        questions = [e.seq for e in gone if e.kind == "elicit"]
        if self._asking is not None and self._asking >= seq:
            questions.append(self._asking)
        self._abandoned = tuple(sorted({*self._abandoned, *questions}))
        self._asking = None
        self._unconsumed = set(self._entries) if self._entries else _NOTHING_UNCONSUMED
        return gone

    def recorded(
        self, scope: str, pos: int, kind: EntryKind, key: str, digest: str
    ) -> JournalEntry | None:
        """The record for the call at (``scope``, ``pos``) if there is one; divergence raises."""
        entry = self._entries.get((scope, pos))
        if entry is None:
            return None
        self._same(entry, kind, key, digest)
        if isinstance(self._unconsumed, set):
            self._unconsumed.discard((scope, pos))
        return entry

    def started(self, scope: str, pos: int, key: str, digest: str) -> JournalEntry | None:
        """The start on record of the step at (``scope``, ``pos``) whose result is not (an
        interrupted run's), if there is one; a different step there raises divergence."""
        entry = self._started.get((scope, pos)) if self._started else None
        if entry is not None:
            self._same(entry, "step", key, digest)
        return entry

    def _same(self, entry: JournalEntry, kind: EntryKind, key: str, digest: str) -> None:
        """Raise ``ReplayDivergence`` unless the tool now makes the call ``entry`` records."""
        assert entry.pos is not None
        scope, pos = entry.scope, entry.pos
        if (entry.kind, entry.key) != (kind, key):
            raise ReplayDivergence(self._tool, scope, pos, entry.describe(), f"{kind} {key!r}")
        if entry.digest is not None and entry.digest != digest:
            raise ReplayDivergence(
                self._tool,
                scope,
                pos,
                f"{entry.describe()} (request digest {entry.digest[:12]})",
                f"{kind} {key!r} with {_DIGESTED[kind]} (request digest {digest[:12]})",
            )

    def note_raised(self, entry: JournalEntry) -> None:
        """A live step's function raised (``entry``'s result: ``RAISED``): a replay from here
        runs it again."""
        assert entry.pos is not None
        if self._started is None:
            self._started = {}
        self._started[(entry.scope, entry.pos)] = entry

    def add(self, entry: JournalEntry) -> None:
        """Keep a live call's entry (after its store accepted it), without the text the store
        wrote (a suspended call keeps its journal in memory: not twice)."""
        if entry.text is not None:
            entry = replace(entry, text=None)
        assert entry.pos is not None
        self._entries[(entry.scope, entry.pos)] = entry
        if self._started:
            self._started.pop((entry.scope, entry.pos), None)
        if entry.seq == self._asking:
            self._asking = None

    def entries(self) -> list[JournalEntry]:
        return sorted(self._entries.values(), key=lambda e: e.seq)

    def to_list(self) -> list[dict[str, Any]]:
        """JSON-serialisable entries in ``seq`` order."""
        return [e.to_dict() for e in self.entries()]

    def __len__(self) -> int:
        return len(self._entries)


def _started_entry(data: Mapping[str, Any]) -> JournalEntry:
    """A step's start on record (``started``: no result is), as an entry whose result is
    empty, or says that its function raised (``RAISED``)."""
    result = data.get("result")
    raised = (
        {RAISED: str(result[RAISED])} if isinstance(result, Mapping) and RAISED in result else {}
    )
    entry = JournalEntry.from_dict({**data, "result": raised})
    if entry.kind != "step" or entry.pos is None:
        raise ValueError(f"journal entry {entry.seq}: only a step with a position can be started")
    return entry


def _abandoned_seq(data: Mapping[str, Any]) -> int:
    seq = data.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise ValueError(f"abandoned journal entry seq must be a positive integer, got {seq!r}")
    return seq


class JournalStore(Protocol):
    """Where a session's journal entries are made durable before the tool may go on.

    ``append`` raising means the entry is not on record: the session stops the call.
    """

    async def append(self, session: PluginSession, entry: JournalEntry) -> None:
        """Make ``entry`` durable, or raise (``ClaimLost`` if another worker holds the call)."""

    async def start_step(
        self, session: PluginSession, entry: JournalEntry, request: dict[str, Any]
    ) -> None:
        """Put a step's start on record (``entry``, its result empty; ``request``: its
        arguments, for operators) before its side effect runs, or raise (``ClaimLost`` if
        another worker holds the call: the side effect never runs here)."""

    async def fork(self, session: PluginSession, seq: int) -> None:
        """Mark the entries from ``seq`` on abandoned (kept, never replayed), or raise."""


class MemoryJournalStore:
    """No storage beyond the session's own memory (the default of ``SessionManager()``)."""

    async def append(self, session: PluginSession, entry: JournalEntry) -> None:
        return None

    async def start_step(
        self, session: PluginSession, entry: JournalEntry, request: dict[str, Any]
    ) -> None:
        return None

    async def fork(self, session: PluginSession, seq: int) -> None:
        return None
