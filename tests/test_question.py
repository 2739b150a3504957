"""A ``Question`` per open question, owned by its session (DESIGN §10): every host hands answers
to it, it validates each once, counts and keeps the refused ones, keeps what a host showed, and
resolves the tool."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from chatbridge import (
    Accept,
    AnswerRefused,
    ElicitRequest,
    ElicitValidationError,
    FormPost,
    PluginContext,
    SessionManager,
    answer_rule,
    create_mcp_tool,
    make_plugin,
)
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
