"""choose_color: the colour picker guest UI asks; the host validates; the tool gets a colour.

The picker is an MCP App (``ui://color-picker``): it reads the default colour and theme from
the call's arguments (``ui/notifications/tool-input``) and the question from the host; without
a theme in the arguments it follows the host's (``hostContext.theme``, the chat's colour
scheme). The same
two values are the question's context, so form-only MCP clients see them too
(``x-model-context``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from chatbridge import ToolContext, create_mcp_tool, guest_ui, make_plugin

__all__ = ["ColorChoice", "ColorParams", "choose_color", "choose_color_plugin"]

PICKER = "ui://color-picker"


class ColorParams(BaseModel):
    default_color: str = Field(
        "#3b82f6", pattern=r"^#[0-9a-fA-F]{6}$", description="Preselected colour"
    )
    theme: Literal["light", "dark"] | None = Field(
        None, description="Theme of the picker (by default the chat's own)"
    )


class ColorChoice(BaseModel):
    color: str = Field(pattern=r"^#[0-9a-fA-F]{6}$", description="Hex colour code")
    name: str | None = Field(None, max_length=40, description="Optional colour name")


async def run(params: ColorParams, ctx: ToolContext) -> dict[str, Any]:
    answer = await ctx.elicit(
        "color",
        message="Please select a color for your theme",
        ui={"uri": PICKER, "mode": "modal"},
        default_color=params.default_color,
        **({"theme": params.theme} if params.theme else {}),
    )
    if not answer.accepted:
        return {"chosen": False, "reason": answer.action}
    return {"chosen": True, "color": answer.content.color.lower(), "name": answer.content.name}


choose_color = (
    create_mcp_tool("choose_color")
    .description("Let the user choose a colour (with a colour picker).")
    .example("Choose a colour")
    .parameters(ColorParams)
    .elicits(color=ColorChoice)
    .done_when("chosen")
    .execute(run)
)

choose_color_plugin = (
    make_plugin(choose_color)
    .on_elicit(color=guest_ui)
    .ui_resource(PICKER, "choose_color/color_picker.html")
    .build()
)
