"""What the offline model says after a tool ran, in words a person reads: a result summed up
("All done: I booked the flight — ticket …"), a refusal of the arguments explained ("the count
should be less than or equal to 13 (you gave 40)"), a tool's name as what it does ("booking the
flight", "planned the meeting"). Pure functions of their inputs (``chatbridge.llm.planner``)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["INVALID_ARGUMENTS", "capital", "doing", "explain_arguments", "summarise"]


class _Call(Protocol):
    @property
    def arguments(self) -> Mapping[str, Any]: ...


_VOWELS = "aeiou"
_IRREGULAR_PAST = {
    "send": "sent", "choose": "chose", "buy": "bought", "make": "made", "find": "found",
    "get": "got", "pay": "paid", "take": "took", "write": "wrote", "set": "set", "put": "put",
    "run": "ran", "give": "gave", "pick": "picked", "book": "booked", "go": "went",
}  # fmt: skip


def _doubles(verb: str) -> bool:
    """A one-syllable verb ending consonant-vowel-consonant doubles its last letter: plan →
    planning, stop → stopped (book, open, edit and visit do not)."""
    return (
        3 <= len(verb) <= 4
        and verb[-1] not in _VOWELS + "wxy"
        and verb[-2] in _VOWELS
        and verb[-3] not in _VOWELS
        and (len(verb) == 3 or verb[-4] not in _VOWELS)  # one syllable: not "open", "edit"
    )


def _gerund(verb: str) -> str:
    if verb.endswith("e") and not verb.endswith("ee"):
        return verb[:-1] + "ing"
    return verb + (verb[-1] if _doubles(verb) else "") + "ing"


def _past(verb: str) -> str:
    if verb in _IRREGULAR_PAST:
        return _IRREGULAR_PAST[verb]
    if verb.endswith("e"):
        return verb + "d"
    if len(verb) > 1 and verb.endswith("y") and verb[-2] not in _VOWELS:
        return verb[:-1] + "ied"
    return verb + (verb[-1] if _doubles(verb) else "") + "ed"


def doing(name: str, *, gerund: bool = False, past: bool = False) -> str:
    """``book_flight`` → "book the flight" ("booking the flight", "booked the flight")."""
    words = [w for w in re.split(r"[_\-\s]+", name.lower()) if w]
    if len(words) < 2:
        return f"the {' '.join(words) or 'tool'}"
    verb = _gerund(words[0]) if gerund else _past(words[0]) if past else words[0]
    return f"{verb} the {' '.join(words[1:])}"


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]


# A person's exits, as a reason says them ("decline" is what the tool returned).
_REASONS = {"decline": "you declined", "cancel": "cancelled"}


def summarise(tool: str, content: str) -> str:
    what = capital(doing(tool, gerund=True))  # "Booking the flight"
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):  # deeply nested JSON is text too
        return f"Here is what {doing(tool, gerund=True)} gave: {content[:300]}"
    if isinstance(data, str):
        return data[:500]
    if not isinstance(data, dict):
        return f"Here is what {doing(tool, gerund=True)} gave: {json.dumps(data)[:300]}"
    if data.get("cancelled") is True:
        return f"{what} was cancelled. Tell me if you want to try again."
    # Not done: a known flag is false, or a result gives a reason next to a false flag
    # ({"chosen": false, "reason": "decline"}).
    flags = ("booked", "ok", "success", "done", "received")
    said = data.get("reason") if isinstance(data.get("reason"), str) else None
    if any(data.get(f) is False for f in flags) or (
        said and any(v is False for v in data.values())
    ):
        reason = _REASONS.get(str(said), said) or data.get("error") or "not completed"
        return f"{what} did not go through ({reason}). Tell me if you want to try again."
    tip = data.get("tip") if isinstance(data.get("tip"), str) else None
    facts = [
        f"{k.replace('_', ' ')} {v}"
        for k, v in data.items()
        if k != "tip" and isinstance(v, str | int | float) and not isinstance(v, bool)
    ][:6]
    done = doing(tool, past=True)
    text = (f"All done: I {done}" if not done.startswith("the ") else f"All done with {done}") + (
        f" — {', '.join(facts)}." if facts else "."
    )
    return text + (f" Tip: {tip}" if tip else "")


INVALID_ARGUMENTS = "error: invalid arguments for tool "
# pydantic's words for a field, as a sentence's predicate ("the count should be ...").
_PREDICATES = (
    ("input should be ", "should be "),
    ("field required", "is needed"),
    ("string should have ", "should have "),
    ("list should have ", "should have "),
    ("value error, ", ""),
)


def explain_arguments(content: str, call: _Call | None) -> str:
    """The system's own refusal of a call's arguments ("Invalid arguments for tool 'x': count:
    Input should be less than or equal to 13. Call it again ...") in words: what was wrong with
    each argument, and what was given."""
    body = content[len("Error: Invalid arguments for tool ") :]
    body = body.split(": ", 1)[1] if ": " in body else body
    body = body.split(". Call it again", 1)[0]
    said = []
    for part in body.split("; ")[:4]:
        name, _, message = part.partition(": ")
        lowered = message.strip().rstrip(".")
        folded = lowered.lower()
        for start, predicate in _PREDICATES:
            if folded.startswith(start):
                lowered = predicate + lowered[len(start) :]
                break
        else:
            lowered = "is not right: " + lowered[:1].lower() + lowered[1:]
        given = call.arguments.get(name) if call is not None and name != "(root)" else None
        shown = f" (you gave {json.dumps(given)[:60]})" if given is not None else ""
        said.append(f"the {name.replace('_', ' ').replace('.', ' ')} {lowered}{shown}")
    return ", and ".join(said)[:600]
