"""The offline model, called the way the app calls any model: through litellm."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from chatbridge.author.sampling import (
    DEFAULT_MODEL,
    LiteLLMSampler,
    SampleRequest,
    configured_model,
)
from chatbridge.llm import litellm_module
from chatbridge.llm.planner import plan_reply
from chatbridge.llm.replies import doing
from plugins.book_flight.tool import book_flight
from plugins.pick_card.tool import pick_card

TOOLS = [book_flight.function_spec()]
LOST = "Error: Plugin session was lost. Please retry the operation."


async def stream(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = TOOLS
) -> tuple[list[str], Any]:
    """Stream a reply; return the text deltas and the reassembled message."""
    litellm = litellm_module()
    extra = {"tools": tools} if tools else {}
    response = await litellm.acompletion(
        model="offline/test", messages=messages, stream=True, **extra
    )
    chunks = [chunk async for chunk in response]
    deltas = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    return deltas, litellm.stream_chunk_builder(chunks).choices[0].message


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool_turn(
    call_id: str, args: dict[str, Any], content: str, tool: str = "book_flight"
) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(args)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": content},
    ]


async def test_a_booking_request_becomes_a_streamed_tool_call() -> None:
    deltas, message = await stream([user("Book a flight from JFK to LAX")])
    assert deltas == []
    [call] = message.tool_calls
    assert call.function.name == "book_flight"
    assert json.loads(call.function.arguments) == {"origin": "JFK", "destination": "LAX"}
    assert call.id.startswith("call_")
    _, again = await stream([user("Book a flight from JFK to LAX")])
    assert again.tool_calls[0].id == call.id  # deterministic


async def test_lowercase_codes_and_city_names_are_understood() -> None:
    _, message = await stream([user("please book flights from jfk to San Francisco tomorrow")])
    assert json.loads(message.tool_calls[0].function.arguments) == {
        "origin": "JFK",
        "destination": "San Francisco",
    }


async def test_missing_arguments_get_a_question_not_a_call() -> None:
    deltas, message = await stream([user("book a flight to Paris")])
    assert not message.tool_calls
    assert "".join(deltas) == (
        "I can book flight for you, but I need the origin and destination. "
        'For example: "book flight from JFK to LAX".'
    )


async def test_other_messages_get_a_helpful_streamed_reply_listing_tools() -> None:
    deltas, message = await stream([user("hello!")])
    assert len(deltas) > 3  # it streams, several deltas
    text = "".join(deltas)
    assert text == message.content
    assert text.startswith(
        "I'm the offline assistant. I can use these tools:\n- book_flight: Book a flight"
    )


async def test_a_tool_result_is_summarised() -> None:
    result = {
        "booked": True,
        "ticket": "CB-SH142-12C-ABC123",
        "seat": "12C",
        "tip": "Arrive early.",
    }
    convo = [
        user("Book a flight from JFK to LAX"),
        *tool_turn("call_1", {"origin": "JFK", "destination": "LAX"}, json.dumps(result)),
    ]
    deltas, _ = await stream(convo)
    assert "".join(deltas) == (
        "All done: I booked the flight — ticket CB-SH142-12C-ABC123, seat 12C. Tip: Arrive early."
    )
    declined = [
        user("x"),
        *tool_turn(
            "call_1", {}, json.dumps({"booked": False, "reason": "flight selection declined"})
        ),
    ]
    deltas, _ = await stream(declined)
    assert "".join(deltas) == (
        "Booking the flight did not go through (flight selection declined). "
        "Tell me if you want to try again."
    )
    # Any false flag with a reason: the person's exit in words.
    color = json.dumps({"chosen": False, "reason": "decline"})
    deltas, _ = await stream([user("x"), *tool_turn("call_1", {}, color, tool="choose_color")])
    assert "".join(deltas) == (
        "Choosing the color did not go through (you declined). Tell me if you want to try again."
    )


async def test_a_lost_session_is_retried_once_then_apologised_for() -> None:
    args = {"origin": "JFK", "destination": "LAX"}
    convo = [user("Book a flight from JFK to LAX"), *tool_turn("call_1", args, LOST)]
    deltas, message = await stream(convo)
    assert "".join(deltas) == "The book flight session was lost; trying again."
    [retry] = message.tool_calls
    assert json.loads(retry.function.arguments) == args and retry.id != "call_1"

    convo += tool_turn(retry.id, args, LOST)
    deltas, message = await stream(convo)
    assert not message.tool_calls
    assert "".join(deltas) == (
        "Sorry, booking the flight did not work because of a problem on our side. "
        "You can try again or rephrase."
    )


async def test_other_tool_errors_get_an_apology() -> None:
    convo = [
        user("Book a flight from JFK to LAX"),
        *tool_turn("call_1", {}, "Error: KeyError: 'seats' in /srv/app/tool.py line 12"),
    ]
    deltas, message = await stream(convo)
    assert not message.tool_calls
    # The error's text is for logs and the admin: the reply says what happened in plain words.
    assert "".join(deltas) == (
        "Sorry, booking the flight did not work because of a problem on our side. "
        "You can try again or rephrase."
    )


async def test_arguments_the_tool_refused_are_explained_with_what_was_given() -> None:
    """The system's own check of a call's arguments is explained: which argument, what it
    should be, what was given; the reply asks for another, it does not call again."""
    refused = (
        "Error: Invalid arguments for tool 'pick_card': count: Input should be less than or "
        "equal to 13. Call it again with arguments matching its parameters schema."
    )
    convo = [
        user("Pick a card, count: 40"),
        *tool_turn("call_1", {"count": 40}, refused, tool="pick_card"),
    ]
    deltas, message = await stream(convo, [pick_card.function_spec()])
    assert not message.tool_calls
    assert "".join(deltas) == (
        "I couldn't pick the card with those details: the count should be less than or "
        "equal to 13 (you gave 40). Tell me what to use instead."
    )
    missing = "Error: Invalid arguments for tool 'book_flight': origin: Field required."
    deltas, _ = await stream([user("x"), *tool_turn("call_1", {}, missing)])
    assert "".join(deltas) == (
        "I couldn't book the flight with those details: the origin is needed. "
        "Tell me what to use instead."
    )


@pytest.mark.parametrize(
    ("said", "call"),
    [
        (
            "I need a flight from Boston to Chicago tomorrow",
            {"origin": "Boston", "destination": "Chicago"},
        ),
        ("Could you find me flights from SFO to SEA?", {"origin": "SFO", "destination": "SEA"}),
    ],
)
async def test_natural_phrasings_find_the_tool(said: str, call: dict[str, str]) -> None:
    """The tool's object is enough ("a flight"), without its verb ("book")."""
    _, message = await stream([user(said)])
    [made] = message.tool_calls
    assert made.function.name == "book_flight" and json.loads(made.function.arguments) == call


def test_a_count_in_words_or_digits_before_the_tool_s_object_is_its_number() -> None:
    tools = [pick_card.function_spec()]
    for said, count in [
        ("pick three cards", 3),
        ("deal me 4 cards please", 4),
        ("pick a card", None),
    ]:
        [made] = plan_reply([{"role": "user", "content": said}], tools).tool_calls
        assert made.arguments.get("count") == count, said


def test_a_tool_s_name_reads_as_what_it_does() -> None:
    assert [doing(n, gerund=True) for n in ("plan_meeting", "open_door", "stop_call")] == [
        "planning the meeting", "opening the door", "stopping the call",
    ]  # fmt: skip
    assert [doing(n, past=True) for n in ("plan_meeting", "send_feedback", "copy_file")] == [
        "planned the meeting", "sent the feedback", "copied the file",
    ]  # fmt: skip


async def test_sampling_is_short_deterministic_and_respects_max_tokens() -> None:
    sampler = LiteLLMSampler("offline/test")
    request = SampleRequest.build("One short travel tip for LAX airport.")
    first, second = await sampler(request), await sampler(request)
    assert first == second
    assert "LAX airport" in first.text and len(first.text) < 200
    assert first.model == "offline/test"
    assert (
        first.usage["total_tokens"]
        == first.usage["prompt_tokens"] + first.usage["completion_tokens"]
        > 0
    )
    short = await sampler(
        SampleRequest.build("One short travel tip for LAX airport.", max_tokens=4)
    )
    assert short.text == " ".join(first.text.split()[:4])
    system = await sampler(
        SampleRequest.build("Summarize: The flight is late. Gate changed.", system="Be brief.")
    )
    assert system.text == "In short: The flight is late."


def test_sample_requests_are_checked() -> None:
    with pytest.raises(ValueError, match="max_tokens must be positive, got 0"):
        SampleRequest.build("x", max_tokens=0)
    with pytest.raises(ValueError, match="need 'role' and 'content'"):
        SampleRequest.build([{"text": "x"}])
    request = SampleRequest.build([user("hi")], system="sys")
    assert request.messages == [{"role": "system", "content": "sys"}, user("hi")]


def test_the_model_comes_from_chatbridge_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATBRIDGE_MODEL", raising=False)
    assert configured_model() == DEFAULT_MODEL == "offline/chatbridge-1"
    monkeypatch.setenv("CHATBRIDGE_MODEL", "openai/gpt-4o-mini")
    assert configured_model() == "openai/gpt-4o-mini"
    assert LiteLLMSampler().model == "openai/gpt-4o-mini"


async def test_a_failing_provider_becomes_a_sampling_error() -> None:
    from chatbridge import SamplingError

    sampler = LiteLLMSampler("nonexistent-provider-xyz/model")
    with pytest.raises(
        SamplingError, match="Sampling with model 'nonexistent-provider-xyz/model' failed"
    ):
        await sampler(SampleRequest.build("hi"))


CONVERSATIONS = [
    [user("Book a flight from JFK to LAX on 2026-12-24")],
    [user("hello")],
    [user("Ich möchte einen Flug von Boston nach Chicago")],
    [
        user("book a flight from JFK to LAX"),
        *tool_turn("c1", {"origin": "JFK"}, '{"booked": true, "ticket": "TKT-1"}'),
    ],
    [user("book a flight"), *tool_turn("c2", {}, LOST)],
]


@pytest.mark.parametrize("messages", CONVERSATIONS, ids=range(len(CONVERSATIONS)))
async def test_the_app_s_offline_path_answers_as_litellm_s_provider_does(
    messages: list[dict[str, Any]],
) -> None:
    """ChatBridge answers the offline model without litellm (a worker's start and its first
    reply do not wait for litellm's import); what it streams and assembles is what the same
    model streams through litellm: the same pieces, text and tool calls."""
    from chatbridge.engine.completion import Completion, stream_completion

    deltas, message = await stream(messages)
    direct = Completion()
    pieces = [p async for p in stream_completion("offline/test", messages, TOOLS, direct)]
    assert pieces == deltas
    assert direct.text == (message.content or "")
    assert [(c.name, json.loads(c.arguments)) for c in direct.tool_calls] == [
        (c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()
    ]
    assert all(c.id.startswith("call_") for c in direct.tool_calls)  # ids are each call's own


async def test_sampling_the_offline_model_answers_as_through_litellm() -> None:
    request = SampleRequest.build("One short travel tip for LAX airport.", max_tokens=6)
    direct = await LiteLLMSampler("offline/test")(request)
    response = await litellm_module("offline/test").acompletion(
        model="offline/test", messages=request.messages, max_tokens=6
    )
    assert direct.text == response.choices[0].message.content
    assert direct.usage == {
        k: getattr(response.usage, k)
        for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    }


def test_a_server_with_the_offline_model_never_imports_litellm(tmp_path: Any) -> None:
    """A fresh interpreter builds the site's ASGI app and books through the offline model's
    reply path: litellm is not imported (it costs a worker seconds of CPU at start)."""
    import subprocess
    import sys

    script = (
        "import sys, asyncio\n"
        "from chatbridge.asgi import application\n"
        "from chatbridge.engine.completion import Completion, stream_completion\n"
        "async def main():\n"
        "    done = Completion()\n"
        "    said = [{'role': 'user', 'content': 'book a flight from JFK to LAX'}]\n"
        "    [p async for p in stream_completion('offline/chatbridge-1', said, [], done)]\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'litellm'))\n"
    )
    env = {**os.environ, "CHATBRIDGE_MODEL": "offline/chatbridge-1"}
    ran = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().splitlines()[-1] == "[]"
