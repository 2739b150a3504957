"""A ``Question`` per open question, owned by its session (DESIGN §10): every host hands answers
to it, it validates each once, counts and keeps the refused ones, keeps what a host showed, and
resolves the tool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from chatbridge import (
    Accept,
    AnswerRefused,
    ElicitNotPending,
    ElicitRequest,
    ElicitValidationError,
    FormPost,
    PluginContext,
    SessionManager,
    TooManyRefusedAnswers,
    answer_rule,
    create_mcp_tool,
    make_plugin,
)
from chatbridge.author.sampling import LiteLLMSampler
from chatbridge.calls.outcome import Failed, RefusedAnswers
from tests.support import until_pause


class Room(BaseModel):
    """A room of the hotel; the rule counts how often it runs."""

    runs: ClassVar[list[str]] = []
    room: str

    @answer_rule("room")
    def _free(cls, room: str, context: dict[str, Any]) -> None:
        cls.runs.append(room)
        if room not in context["free"]:
            raise AnswerRefused(f"Room {room} is taken.")


async def stay(params: Any, ctx: Any) -> str:
    answer = await ctx.elicit("room", message="Which room?", free=["101", "102"])
    return f"room {answer.content.room}"


tool = create_mcp_tool("stay").elicits(room=Room).execute(stay)


class Form:
    """Plays the user at the chat's form: each show gets the next post."""

    def __init__(self, *posts: FormPost) -> None:
        self.posts, self.errors = list(posts), list[dict[str, list[str]]]()

    async def show(
        self, template: str, context: dict[str, Any], errors: dict[str, list[str]]
    ) -> FormPost:
        self.errors.append(errors)
        return self.posts.pop(0)


async def pick(request: ElicitRequest, ctx: PluginContext) -> Any:
    return (await ctx.render("rooms.html")).result


plugin = make_plugin(tool).on_elicit(room=pick).build()


@pytest.fixture(autouse=True)
def fresh_runs() -> None:
    Room.runs.clear()


async def test_a_chat_answer_is_validated_once_by_its_question(manager: SessionManager) -> None:
    session = await manager.create(tool, {}, call_id="q1")
    await until_pause(session)
    question = session.question
    assert question is not None and question.attempts == 0
    request = question.request
    form = Form(FormPost("accept", {"room": "999"}), FormPost("accept", {"room": "102"}))
    # As the chat does: the form's posts go to the question, the handler's answer too.
    result = await plugin.handle(
        request, PluginContext(request, form, session.answers_for(request.id))
    )
    await session.respond_to_elicit(request.id, result)
    assert await until_pause(session) == [("completed", "room 102")]
    assert Room.runs == ["999", "102"]  # each post checked once: none again on its way in
    assert form.errors == [{}, {"room": ["Room 999 is taken."]}]
    assert (question.attempts, [r.data for r in question.refusals]) == (1, [{"room": "999"}])
    assert session.question is None and session.answer_of(request.id) == Accept(Room(room="102"))


async def test_every_host_hands_answers_to_the_same_question(manager: SessionManager) -> None:
    session = await manager.create(tool, {}, call_id="q2")
    await until_pause(session)
    question = session.question
    assert question is not None
    for bad in ({"room": "7"}, {"room": 12}):  # an MCP client's answers, say
        with pytest.raises(ElicitValidationError):
            await session.respond_to_elicit(question.id, Accept(bad))
    assert question.attempts == 2 and question.error is not None
    assert [r.data for r in question.refusals] == [{"room": "7"}, {"room": 12}]
    assert [r.errors["room"] for r in question.refusals][0] == ["Room 7 is taken."]
    assert list(question.errors) == ["room"]  # the last refusal's, for the next form
    await session.respond_to_elicit(question.id, {"action": "accept", "content": {"room": "101"}})
    assert await until_pause(session) == [("completed", "room 101")]
    assert Room.runs == ["7", "101"]  # 12 is not a string: refused before the rule


async def test_a_resumed_call_keeps_counting_the_refusals_on_record(
    manager: SessionManager,
) -> None:
    session = await manager.create(tool, {}, call_id="q3", refused_on_record=("stay:room:q3:1", 2))
    await until_pause(session)
    assert session.question is not None and session.question.attempts == 2
    with pytest.raises(ElicitValidationError):
        await session.respond_to_elicit("stay:room:q3:1", Accept({"room": "5"}))
    assert session.question.attempts == 3


def refused_times(count: int, room: str) -> str:
    return (
        f"The answer to 'room' was refused {count} times, as often as a question allows, so the "
        f"question was closed and the call failed. Last refusal: Room: Room {room} is taken. "
        "Call the tool again to start over."
    )


@pytest.fixture
async def strict() -> AsyncIterator[SessionManager]:
    """A manager whose questions take three refused answers."""
    mgr = SessionManager(sampler=LiteLLMSampler("offline/test"), max_refused=3)
    yield mgr
    await mgr.shutdown("test finished")


async def test_the_last_refused_answer_closes_the_question_and_fails_the_call(
    strict: SessionManager,
) -> None:
    session = await strict.create(tool, {}, call_id="q4")
    await until_pause(session)
    for room in ("7", "8"):  # under the limit: refused, still asked
        with pytest.raises(ElicitValidationError):
            await session.respond_to_elicit("stay:room:q4:1", Accept({"room": room}))
        assert session.question is not None
    with pytest.raises(TooManyRefusedAnswers) as closed:
        await session.respond_to_elicit("stay:room:q4:1", Accept({"room": "9"}))
    said = refused_times(3, "9")
    assert str(closed.value) == said
    assert (closed.value.elicit_id, closed.value.key, closed.value.refused) == (
        "stay:room:q4:1",
        "room",
        3,
    )
    assert closed.value.errors == {"room": ["Room 9 is taken."]}
    assert await until_pause(session) == [("failed", f"TooManyRefusedAnswers: {said}")]
    assert session.outcome == Failed(
        error_type="TooManyRefusedAnswers",
        message=said,
        refused=RefusedAnswers(key="room", count=3, why="Room: Room 9 is taken"),
    )
    assert session.refused_too_often("stay:room:q4:1") is closed.value
    with pytest.raises(ElicitNotPending):  # closed: nothing more is taken
        await session.respond_to_elicit("stay:room:q4:1", Accept({"room": "101"}))


async def test_a_form_stops_showing_itself_once_its_question_has_closed(
    strict: SessionManager,
) -> None:
    session = await strict.create(tool, {}, call_id="q5")
    await until_pause(session)
    question = session.question
    assert question is not None
    request = question.request
    # Two posts the model refuses and one the form's own check refuses: three, the limit.
    form = Form(*(FormPost("accept", {"room": room}) for room in ("7", "8", "")))

    def precheck(data: dict[str, Any]) -> dict[str, list[str]]:
        return {"room": ["Enter a room."]} if not data["room"] else {}

    async def picky(request: ElicitRequest, ctx: PluginContext) -> Any:
        return (await ctx.render("rooms.html", precheck=precheck)).result

    answers = session.answers_for(request.id)
    with pytest.raises(TooManyRefusedAnswers) as closed:
        await picky(request, PluginContext(request, form, answers))
    assert form.errors == [{}, {"room": ["Room 7 is taken."]}, {"room": ["Room 8 is taken."]}]
    assert "Last refusal: Room: Enter a room." in str(closed.value)
    assert [e[0] for e in await until_pause(session)] == ["failed"]


async def test_without_a_limit_a_question_is_asked_for_as_long_as_it_takes() -> None:
    mgr = SessionManager(sampler=LiteLLMSampler("offline/test"), max_refused=None)
    try:
        session = await mgr.create(tool, {}, call_id="q6")
        await until_pause(session)
        for n in range(12):
            with pytest.raises(ElicitValidationError):
                await session.respond_to_elicit("stay:room:q6:1", Accept({"room": str(n)}))
        assert session.question is not None and session.question.attempts == 12
        await session.respond_to_elicit("stay:room:q6:1", Accept({"room": "101"}))
        assert await until_pause(session) == [("completed", "room 101")]
    finally:
        await mgr.shutdown("test finished")


async def test_the_refusals_on_record_count_towards_the_limit(manager: SessionManager) -> None:
    session = await manager.create(tool, {}, call_id="q7", refused_on_record=("stay:room:q7:1", 4))
    await until_pause(session)
    with pytest.raises(TooManyRefusedAnswers) as closed:  # the default limit: five
        await session.respond_to_elicit("stay:room:q7:1", Accept({"room": "5"}))
    assert str(closed.value) == refused_times(5, "5")


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="max_refused must be 0 or more, or None"):
        SessionManager(max_refused=-1)
