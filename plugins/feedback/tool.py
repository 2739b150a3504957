"""send_feedback: every kind of form field, drawn from the schema by ``auto_form``."""

from __future__ import annotations

import secrets
from datetime import date, datetime
from typing import Any, Literal

from pydantic import AnyUrl, BaseModel, Field

from chatbridge import ToolContext, auto_form, create_mcp_tool, make_plugin

__all__ = ["Feedback", "feedback_plugin", "send_feedback"]


class Feedback(BaseModel):
    name: str = Field(min_length=2, max_length=40, title="Your name")
    email: str = Field(
        pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", title="Email", json_schema_extra={"format": "email"}
    )
    website: AnyUrl | None = Field(None, title="Website")
    visit_date: date = Field(title="Date of your visit")
    call_back_at: datetime | None = Field(None, title="Call me back at")
    rating: int = Field(ge=1, le=5, title="Rating", description="1 (poor) to 5 (great)")
    hours_saved: float = Field(0, ge=0, le=100, title="Hours saved")
    topic: Literal["bug", "idea", "praise", "question"] = Field(title="Topic")
    contact: Literal["email", "phone", "none"] = Field("email", title="How to reach you")
    areas: list[Literal["chat", "tools", "admin", "mcp"]] = Field(
        default_factory=list, title="Areas"
    )
    subscribe: bool = Field(False, title="Subscribe to the newsletter")
    code: str | None = Field(
        None, pattern=r"^[A-Z]{3}-\d{3}$", title="Ticket code", description="Like ABC-123"
    )
    comment: str = Field("", max_length=1000, title="Comment")


def file_feedback(feedback: dict[str, Any]) -> dict[str, Any]:
    """Store the feedback (a side effect: journaled, never repeated on replay)."""
    return {"received": True, "reference": f"FB-{secrets.token_hex(3).upper()}", **feedback}


async def run(params: Any, ctx: ToolContext) -> dict[str, Any]:
    answer = await ctx.elicit("feedback", message="Tell us what you think")
    if not answer.accepted:
        return {"received": False, "reason": answer.action}
    return dict(
        await ctx.step("file_feedback", file_feedback, answer.content.model_dump(mode="json"))
    )


send_feedback = (
    create_mcp_tool("send_feedback")
    .description("Send feedback about ChatBridge to the team (asks for approval first).")
    .example("Send feedback")
    .elicits(feedback=Feedback)
    .done_when("received")
    .needs_approval()
    .execute(run)
)

feedback_plugin = make_plugin(send_feedback).on_elicit(feedback=auto_form).build()
