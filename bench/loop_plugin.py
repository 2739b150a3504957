"""Benchmark-only tool ``loop_ask``: asks a one-field question again and again.

The offline model calls it for a user message containing "loop ask". Each answer is validated
against ``Answer`` and the tool immediately asks the next question, so one answer → next form is
exactly one elicit round trip through the whole stack (consumer, hub, plugin handler, session,
journal, recorder, rendering). The form is drawn by ``auto_form``. Answer ``{"value": "stop"}``
(or decline) to end it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from chatbridge import ToolContext, auto_form, create_mcp_tool, make_plugin

__all__ = ["Answer", "loop_ask", "loop_plugin"]


class Answer(BaseModel):
    value: str = Field(min_length=1, max_length=64, title="Value")


async def run(params: Any, ctx: ToolContext) -> dict[str, Any]:
    n = 0
    while True:
        n += 1
        answer = await ctx.elicit("answer", message=f"Question {n}: any value?")
        if not answer.accepted or answer.content.value == "stop":
            return {"questions": n}


loop_ask = (
    create_mcp_tool("loop_ask")
    .description("Benchmark: ask a one-field question repeatedly.")
    .elicits(answer=Answer)
    .execute(run)
)

loop_plugin = make_plugin(loop_ask).on_elicit(answer=auto_form).build()
