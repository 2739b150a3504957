"""A tool whose guest UI speaks only seed 004's messages (DESIGN §7), for servers started with
tests/seed004_settings.py: the chat's host must serve it as it serves MCP Apps."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from chatbridge import ToolContext, create_mcp_tool, guest_ui, make_plugin

__all__ = ["TintChoice", "tint_plugin"]

GUEST = "ui://seed-004-guest"


class TintParams(BaseModel):
    pass


class TintChoice(BaseModel):
    tint: str = Field(pattern=r"^#[0-9a-fA-F]{6}$", description="Hex colour code")


async def run(params: TintParams, ctx: ToolContext) -> dict[str, Any]:
    answer = await ctx.elicit(
        "tint",
        message="Which tint?",
        ui={"uri": GUEST, "mode": "inline", "context": {"defaultTint": "#445566"}},
    )
    if not answer.accepted:
        return {"tint": None, "reason": answer.action}
    return {"tint": answer.content.tint.lower()}


tint_tool = (
    create_mcp_tool("pick_tint")
    .description("Let the user pick a tint (with a seed 004 guest UI).")
    .parameters(TintParams)
    .elicits(tint=TintChoice)
    .execute(run)
)

tint_plugin = (
    make_plugin(tint_tool).on_elicit(tint=guest_ui).ui_resource(GUEST, "seed004_guest.html").build()
)
