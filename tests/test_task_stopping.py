"""A task being stopped (cancelled by its client, expired, refused) shows its end, never
"working" in between: the MCP Tasks view of a session whose tool is still unwinding, served in
process (the transport's own tests drive it over HTTP)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from chatbridge import SessionManager, create_mcp_tool
from chatbridge.mcp.flat import flat_schemas
from chatbridge.mcp.round_state import input_required
from chatbridge.mcp.task_serving import CANCELLED_BY, TRANSPORT, TaskServing
from tests.support import PickHotel


async def test_a_task_whose_tool_is_unwinding_from_a_cancel_is_shown_cancelled(
    manager: SessionManager,
) -> None:
    unwinding, release = asyncio.Event(), asyncio.Event()

    async def body(params: Any, ctx: Any) -> str:
        try:
            await ctx.elicit("pick_hotel", message="Which hotel?")
        finally:
            unwinding.set()
            await release.wait()  # the tool's own clean-up, still running
        return "unreachable"

    tool = create_mcp_tool("slow_to_stop").elicits(pick_hotel=PickHotel).execute(body)
    serving = TaskServing(
        manager,
        {tool.name: tool},
        functools.partial(input_required, {tool.name: flat_schemas(tool)}),  # as Rounds shapes
        900.0,
        cluster=None,
        settle=30.0,
        poll_interval=0.1,
    )
    session = await manager.create(tool, {}, call_id="task-1", meta={"transport": TRANSPORT})
    assert (await serving.started(session))["status"] == "input_required"

    assert await session.stop("cancelled by the MCP client", by=CANCELLED_BY) == "aborted"
    await unwinding.wait()
    getting = asyncio.create_task(serving.serve("get", "task-1", {}))  # runs before the tool
    release.set()
    task = await getting
    assert (task["status"], task.get("statusMessage")) == (
        "cancelled",
        "The tool call was aborted: cancelled by the MCP client",
    ), task
    assert await serving.serve("get", "task-1", {}) == task
