"""Typed elicitation keys: the answer type flows from the key to the tool and to its handler,
so mistakes are the type checker's errors; at run time a key must be the one declared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import BaseModel

from chatbridge import (
    Accept,
    ElicitKey,
    PluginDefinitionError,
    SessionManager,
    ToolContext,
    ToolDefinitionError,
    create_mcp_tool,
    make_plugin,
)
from tests.support import until_pause

ROOT = Path(__file__).resolve().parent.parent


# A small tool as a plugin author writes it: mypy checks this text (MISTAKES replaces lines
# to make it wrong), and the tests below run it.
TOOL = """\
from pydantic import BaseModel

from chatbridge import (
    ElicitKey, ElicitRequest, ElicitResult, PluginContext, ToolContext, create_mcp_tool,
    make_plugin,
)


class PickSeat(BaseModel):
    row: int
    seat: str


class PickMeal(BaseModel):
    meal: str


PICK_SEAT = ElicitKey("pick_seat", PickSeat)
PICK_MEAL = ElicitKey("pick_meal", PickMeal)


async def run(params: BaseModel, ctx: ToolContext) -> str:
    seat = await ctx.elicit(PICK_SEAT, message="Which seat?")
    if not seat.accepted:
        return "no seat"
    meal = await ctx.elicit(PICK_MEAL, message="Which meal?")
    if not meal.accepted:
        return "no meal"
    return f"{seat.content.row}{seat.content.seat} {meal.content.meal}"


async def seat_form(
    req: ElicitRequest[PickSeat], ctx: PluginContext[PickSeat]
) -> ElicitResult[PickSeat]:
    return (await ctx.render("seat.html")).result


async def meal_form(
    req: ElicitRequest[PickMeal], ctx: PluginContext[PickMeal]
) -> ElicitResult[PickMeal]:
    return (await ctx.render("meal.html")).result


tool = create_mcp_tool("fly").elicits(PICK_SEAT, PICK_MEAL).execute(run)
plugin = make_plugin(tool).on(PICK_SEAT, seat_form).on(PICK_MEAL, meal_form).build()
"""

MISTAKES = {
    # a misspelled key
    "ctx.elicit(PICK_MEAL, ": "ctx.elicit(PICK_MAEL, ",
    # a misspelled field of the answer
    "{seat.content.row}{seat.content.seat}": "{seat.content.row}{seat.content.set}",
    # a handler written for another key
    ".on(PICK_SEAT, seat_form)": ".on(PICK_SEAT, meal_form)",
}


def run_source(source: str) -> ModuleType:
    module = ModuleType("fly")
    exec(compile(source, "fly.py", "exec"), module.__dict__)  # noqa: S102 - our own sample
    return module


FLY = run_source(TOOL)
PickSeat, PickMeal = FLY.PickSeat, FLY.PickMeal
PICK_SEAT, PICK_MEAL = FLY.PICK_SEAT, FLY.PICK_MEAL


def mypy(source: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "fly.py"
    path.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent"]
        + ["--config-file", "", "--cache-dir", str(tmp_path / "cache"), str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow  # runs mypy in a process of its own
def test_a_correct_tool_passes_mypy_strict(tmp_path: Path) -> None:
    run = mypy(TOOL, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout


@pytest.mark.slow  # runs mypy in a process of its own
def test_mypy_reports_a_misspelled_key_a_misspelled_field_and_a_handler_of_another_key(
    tmp_path: Path,
) -> None:
    source = TOOL
    for right, wrong in MISTAKES.items():
        assert source.count(right) == 1
        source = source.replace(right, wrong)
    run = mypy(source, tmp_path)
    assert run.returncode == 1
    lines = source.splitlines()
    errors = {
        (lines[int(line.split(":")[1]) - 1].strip(), line.rsplit("[", 1)[-1].rstrip("]"))
        for line in run.stdout.splitlines()
        if ": error: " in line
    }
    assert errors == {
        ('meal = await ctx.elicit(PICK_MAEL, message="Which meal?")', "name-defined"),
        ('return f"{seat.content.row}{seat.content.set} {meal.content.meal}"', "attr-defined"),
        (
            "plugin = make_plugin(tool).on(PICK_SEAT, meal_form).on(PICK_MEAL, meal_form).build()",
            "arg-type",
        ),
    }
    assert '"PickSeat" has no attribute "set"' in run.stdout


async def test_a_typed_key_delivers_its_model_at_run_time(manager: SessionManager) -> None:
    async def run(params: BaseModel, ctx: ToolContext) -> str:
        seat = await ctx.elicit(PICK_SEAT, message="Which seat?")
        meal = await ctx.elicit("pick_meal", message="Which meal?")  # a string key still works
        assert isinstance(seat.content, PickSeat) and isinstance(meal.content, PickMeal)
        return f"{seat.content.row}{seat.content.seat} {meal.content.meal}"

    tool = create_mcp_tool("fly").elicits(PICK_SEAT, pick_meal=PickMeal).execute(run)
    assert tool.elicits == {"pick_seat": PickSeat, "pick_meal": PickMeal}
    session = await manager.create(tool, {}, call_id="c1")
    first = (await until_pause(session))[-1]
    assert first[:1] == ("elicit",) and first[1] == "fly:pick_seat:c1:1"
    await session.respond_to_elicit(first[1], Accept({"row": "12", "seat": "C"}))
    second = (await until_pause(session))[-1]
    await session.respond_to_elicit(second[1], Accept({"meal": "veg"}))
    assert (await until_pause(session))[-1] == ("completed", "12C veg")


async def test_a_key_whose_model_differs_from_the_declared_one_is_refused_before_asking(
    manager: SessionManager,
) -> None:
    other = ElicitKey("pick_seat", PickMeal)

    async def run(params: BaseModel, ctx: ToolContext) -> str:
        await ctx.elicit(other, message="Which seat?")
        return "asked"

    tool = create_mcp_tool("fly").elicits(PICK_SEAT).execute(run)
    session = await manager.create(tool, {}, call_id="c2")
    events = await until_pause(session)
    assert [e[0] for e in events] == ["failed"]
    assert "declared 'pick_seat' with the answer model PickSeat" in str(events[-1][1])


def test_definition_mistakes_with_keys_are_refused_with_their_reason() -> None:
    with pytest.raises(ToolDefinitionError, match="'Pick-Seat' must be snake_case"):
        ElicitKey("Pick-Seat", PickSeat)
    with pytest.raises(ToolDefinitionError, match="must be a pydantic BaseModel subclass"):
        ElicitKey("pick_seat", dict)  # type: ignore[type-var]
    with pytest.raises(ToolDefinitionError, match="'pick_seat' is declared twice"):
        create_mcp_tool("fly").elicits(PICK_SEAT, pick_seat=PickSeat)
    with pytest.raises(ToolDefinitionError, match="takes ElicitKey objects"):
        create_mcp_tool("fly").elicits("pick_seat")  # type: ignore[arg-type]

    async def run(params: BaseModel, ctx: ToolContext) -> None:
        return None

    tool = create_mcp_tool("fly").elicits(pick_meal=PickSeat).execute(run)
    with pytest.raises(PluginDefinitionError, match="declared with PickSeat"):
        make_plugin(tool).on(PICK_MEAL, FLY.meal_form)
