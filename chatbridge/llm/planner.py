r"""What the offline model says: a small, deterministic reader of conversations.

It picks a tool whose name the user's words contain ("book a flight" → ``book_flight``), or
whose object they do ("I need a flight"), fills the arguments from the tool's JSON Schema ("from
JFK to LAX", ``name: value``, "three cards" for its one number), summarises tool results and
explains arguments a tool refused (``chatbridge.llm.replies`` words them), retries a lost
session once (only on the system's own marker), says plainly when the user stopped or denied a
call or an operator stopped it, or when a question closed after its answers were refused too
often (never retrying those), and apologises for other tool errors
without quoting them. Without tools on offer (``ctx.sample``) it writes one short deterministic
answer to the prompt.

Everything here runs synchronously on the server's event loop, on text any visitor can send, so
every step must be linear in the size of its input; ``message_text`` says how a message is read
so (in one pass, without backtracking).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chatbridge.llm.message_text import MessageText, key_tokens
from chatbridge.llm.replies import INVALID_ARGUMENTS, doing, explain_arguments, summarise

__all__ = ["Reply", "ToolCall", "plan_reply"]

Message = Mapping[str, Any]

_ORIGIN_HINTS = ("origin", "from", "source", "depart", "start")
_DEST_HINTS = ("destination", "dest", "to", "arriv", "target", "end")
# Only the system's own marker of a lost session (LOST_SESSION_MESSAGE) is retried: words in
# a reason a person typed ("please retry") never start a call again.
_LOST_SESSION = "error: plugin session was lost"
_USER_STOPPED = "stopped by the user:"
_DENIED = "denied by the user:"
_OPERATOR = "stopped by an operator:"
_REFUSED = "answer refused:"
_TIPS = (
    "Arrive two hours before departure at {s}; security lines peak in the early morning.",
    "At {s}, keep your boarding pass on your phone and check the gate again after security.",
    "Pack a refillable bottle: {s} has water stations past security.",
    "Allow extra time for the terminal transfer at {s}, and follow the signs for connections.",
)


@dataclass(frozen=True)
class ToolCall:
    """A function call the model decided to make."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """The model's turn: text, or text plus tool calls."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


def _text_of(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _digest(*parts: object) -> str:
    raw = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(raw).hexdigest()


def _call_ids(messages: Sequence[Message], names: Sequence[str]) -> list[str]:
    """``call_`` and ``_digest(messages, name)[:24]`` for each name, encoding messages once."""
    head = hashlib.sha256(f"[{json.dumps(messages, sort_keys=True, default=str)}, ".encode())
    ids = []
    for name in names:
        digest = head.copy()
        digest.update(f"{json.dumps(name)}]".encode())
        ids.append(f"call_{digest.hexdigest()[:24]}")
    return ids


def _tool_name(spec: Mapping[str, Any]) -> str:
    return str(spec.get("function", spec).get("name", ""))


def _tool_function(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = spec.get("function", spec)
    return fn if isinstance(fn, Mapping) else {}


def _words(text: str) -> list[str]:
    # British spellings match American tool names: "choose a colour" → choose_color.
    return re.findall(r"[a-z0-9]+", text.lower().replace("colour", "color"))


def _tokens(tool: Mapping[str, Any]) -> list[str]:
    return [t for t in re.split(r"[_\-]+", _tool_name(tool).lower()) if t]


def _matches(tokens: Sequence[str], words: Sequence[str]) -> bool:
    return bool(tokens) and all(any(w.startswith(t) for w in words) for t in tokens)


def _asked_for(tools: Sequence[Mapping[str, Any]], words: Sequence[str]) -> list[Mapping[str, Any]]:
    """The tools the words ask for: those whose name's words all appear ("book a flight" →
    ``book_flight``), else those whose object does, without the verb ("I need a flight")."""
    named = [t for t in tools if _matches(_tokens(t), words)]
    if named:
        return named
    return [t for t in tools if len(_tokens(t)) > 1 and _matches(_tokens(t)[1:], words)]


# "three cards": a count in words, up to a dozen.
_NUMBER_WORDS = {
    word: n
    for n, word in enumerate(
        (
            "zero", "one", "two", "three", "four", "five", "six",
            "seven", "eight", "nine", "ten", "eleven", "twelve",
        )
    )
}  # fmt: skip
_NUMBER_WORDS.update({"a": 1, "an": 1, "single": 1, "couple": 2, "dozen": 12})


def _counted(tool: Mapping[str, Any], words: Sequence[str]) -> int | None:
    """A number said right before the tool's object ("pick three cards" → 3), if any."""
    objects = _tokens(tool)[1:] or _tokens(tool)
    for before, word in zip(words, words[1:], strict=False):
        if any(word.startswith(t) for t in objects):
            if before.isdigit() and len(before) <= 6:
                return int(before)
            if before in _NUMBER_WORDS and before not in ("a", "an"):
                return _NUMBER_WORDS[before]
    return None


def _coerce(value: str, schema: Mapping[str, Any]) -> Any:
    kind = schema.get("type")
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
    except ValueError:
        return value
    if kind == "boolean":
        return value.lower() in ("yes", "true", "1", "on")
    return value


def _hinted(name: str, hint: str) -> bool:
    name = name.lower()
    return name == hint or name.startswith(hint + "_") or (len(hint) > 3 and name.startswith(hint))


def _extract_arguments(
    tool: Mapping[str, Any], text: MessageText, words: Sequence[str]
) -> dict[str, Any]:
    params = _tool_function(tool).get("parameters") or {}
    props: Mapping[str, Any] = params.get("properties") or {}
    args: dict[str, Any] = {}
    for name, schema in props.items():
        found = (text.explicit(key_tokens(key)) for key in {name, name.replace("_", " ")})
        first = min((f for f in found if f is not None), default=None)
        if first is not None:
            args[name] = _coerce(first[1], schema)
    counts = [n for n, schema in props.items() if schema.get("type") == "integer"]
    if len(counts) == 1 and counts[0] not in args:  # one number to fill: "three cards"
        count = _counted(tool, words)
        if count is not None:
            args[counts[0]] = count
    if text.route:
        for hints, value in zip((_ORIGIN_HINTS, _DEST_HINTS), text.route, strict=True):
            for name in props:
                if name not in args and any(_hinted(name, h) for h in hints):
                    if value:
                        args[name] = value
                    break
    return args


def _describe_tools(tools: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for tool in tools:
        fn = _tool_function(tool)
        props = list((fn.get("parameters") or {}).get("properties") or {})
        example = f" (give {', '.join(props)})" if props else ""
        lines.append(f"- {fn.get('name')}: {fn.get('description') or 'no description'}{example}")
    return "\n".join(lines)


def _help(tools: Sequence[Mapping[str, Any]]) -> Reply:
    if not tools:
        return Reply(
            "I'm the offline assistant. No tools are available right now, so I can only chat."
        )
    names = [_tool_name(t) for t in tools]
    sample = names[0].replace("_", " ")
    return Reply(
        "I'm the offline assistant. I can use these tools:\n"
        f"{_describe_tools(tools)}\n"
        f'Ask in your own words, for example: "{sample} from JFK to LAX".'
    )


def _calls_by_id(messages: Sequence[Message]) -> dict[str, ToolCall]:
    calls: dict[str, ToolCall] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            try:
                arguments = json.loads(fn.get("arguments") or "{}")
            except (ValueError, RecursionError):
                arguments = {}
            calls[str(call.get("id"))] = ToolCall(
                str(call.get("id")), str(fn.get("name")), arguments
            )
    return calls


def _their_reason(content: str) -> str:
    start = content.find("(their reason: ")
    end = content.rfind(")")
    if start < 0 or end <= start:
        return ""
    return content[start + len("(their reason: ") : end]


def _refused_answer(content: str) -> tuple[str, str]:
    """How often the answer was refused ("5 times", "once") and the last refusal's words, from
    the tool message of a call whose question closed so (``engine/tool_message.py``)."""
    start = content.find(" was refused ")
    times = content[start + len(" was refused ") :].split(",", 1)[0] if start >= 0 else ""
    last, at = "", content.find("Last refusal: ")
    if at >= 0:
        end = content.find(". Tell the user why", at)
        last = content[at + len("Last refusal: ") : end if end >= 0 else None]
    return times[:40], last[:300]


def _after_tool(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> Reply:
    last = messages[-1]
    content = _text_of(last)
    call = _calls_by_id(messages).get(str(last.get("tool_call_id")))
    name = call.name if call else "tool"
    folded = content[:40].lower()
    if folded.startswith(_USER_STOPPED):
        return Reply(
            f"OK, I stopped {doing(name, gerund=True)} as you asked. "
            "Tell me if you want to start again."
        )
    if folded.startswith(_DENIED):
        return Reply(
            f"OK, I did not {doing(name, gerund=False)}, as you asked. "
            "Tell me if you change your mind."
        )
    if folded.startswith(_REFUSED):
        times, why = _refused_answer(content)
        return Reply(
            f"I stopped {doing(name, gerund=True)}: your answer was refused {times}"
            + (f" (last refusal: {why})" if why else "")
            + ". Tell me if you want to try again."
        )
    if folded.startswith(_OPERATOR):
        why = _their_reason(content)[:300]
        return Reply(
            f"An operator stopped {doing(name, gerund=True)}"
            + (f" (their reason: {why})" if why else "")
            + ". I won't start it again by myself; ask me if you still need it."
        )
    if not folded.startswith("error"):
        return Reply(summarise(name, content))
    if (
        content[:40].lower().startswith(INVALID_ARGUMENTS)
    ):  # the system's own check of the arguments
        return Reply(
            f"I couldn't {doing(name)} with those details: "
            f"{explain_arguments(content, call)}. Tell me what to use instead."
        )
    since_user = 0
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        since_user += sum(1 for c in message.get("tool_calls") or () if c)
    retryable = folded.startswith(_LOST_SESSION)
    offered = call is not None and any(_tool_name(t) == call.name for t in tools)
    if call is not None and retryable and offered and since_user < 2:
        retry = ToolCall(f"call_{_digest(messages)[:24]}", call.name, call.arguments)
        return Reply(f"The {name.replace('_', ' ')} session was lost; trying again.", [retry])
    # The error's text is for logs and the admin, never quoted to the user.
    return Reply(
        f"Sorry, {doing(name, gerund=True)} did not work because of a problem on our side. "
        "You can try again or rephrase."
    )


def _after_user(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> Reply:
    text = _text_of(messages[-1])
    words = _words(text)
    parsed: MessageText | None = None
    calls: list[tuple[str, dict[str, Any]]] = []
    question: Reply | None = None
    for tool in _asked_for(tools, words):  # every tool asked for is called, in one reply
        fn = _tool_function(tool)
        parsed = parsed or MessageText(text)
        args = _extract_arguments(tool, parsed, words)
        required = list((fn.get("parameters") or {}).get("required") or ())
        missing = [r for r in required if r not in args]
        name = str(fn.get("name"))
        if missing:
            question = question or Reply(
                f"I can {name.replace('_', ' ')} for you, but I need the "
                f"{' and '.join(m.replace('_', ' ') for m in missing)}. "
                f'For example: "{name.replace("_", " ")} from JFK to LAX".'
            )
            continue
        calls.append((name, args))
    if calls:
        ids = _call_ids(messages, [name for name, _ in calls])
        return Reply("", [ToolCall(i, *call) for i, call in zip(ids, calls, strict=True)])
    return question or _help(tools)


def _sample(messages: Sequence[Message], max_tokens: int | None) -> str:
    prompt = _text_of(messages[-1]) if messages else ""
    subject = MessageText(prompt).subject() or "your trip"
    pick = int(_digest(prompt)[:8], 16)
    folded = prompt.lower()
    if "tip" in folded:
        text = _TIPS[pick % len(_TIPS)].format(s=subject)
    elif "summarise" in folded or "summarize" in folded:
        body = MessageText(prompt.split(":", 1)[-1].strip()).first_sentence()
        text = f"In short: {body}"
    else:
        text = (
            f"A short answer about {subject}: keep it simple and check the details before you go."
        )
    if max_tokens is not None:
        text = " ".join(text.split()[:max_tokens])
    return text


def plan_reply(
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]] | None = None,
    max_tokens: int | None = None,
) -> Reply:
    """Decide the offline model's reply to ``messages`` given the ``tools`` on offer."""
    tools = list(tools or ())
    convo = [m for m in messages if m.get("role") != "system"]
    if not tools:
        return Reply(_sample(convo, max_tokens))
    if not convo:
        return _help(tools)
    role = convo[-1].get("role")
    if role == "tool":
        return _after_tool(convo, tools)
    if role == "user":
        return _after_user(convo, tools)
    return _help(tools)
