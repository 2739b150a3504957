"""create_mcp_tool: the builder, its checks, and parameter validation."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from chatbridge import InvalidToolParams, ToolDefinitionError, create_mcp_tool
from chatbridge.author.tools import NoParams
from tests.support import PickHotel, TripParams, trip_tool


async def noop(params: Any, ctx: Any) -> None:
    return None


def test_a_built_tool_exposes_name_elicits_and_schemas() -> None:
    assert trip_tool.name == "plan_trip"
    assert trip_tool.description == "Plan a trip: choose a hotel, confirm, book, rate."
    assert list(trip_tool.elicits) == ["pick_hotel", "confirm", "rate"]
    assert trip_tool.elicits["pick_hotel"] is PickHotel
    schema = trip_tool.parameters_schema
    assert schema["required"] == ["city", "nights"]
    assert schema["properties"]["nights"]["maximum"] == 30
    assert trip_tool.function_spec() == {
        "type": "function",
        "function": {
            "name": "plan_trip",
            "description": trip_tool.description,
            "parameters": schema,
        },
    }
    assert trip_tool.elicit_schema("pick_hotel")["properties"]["hotel"]["type"] == "string"


def test_elicits_is_required_but_may_be_empty() -> None:
    with pytest.raises(ToolDefinitionError) as info:
        create_mcp_tool("t").execute(noop)
    assert str(info.value) == (
        "Tool 't' has no .elicits(...) declaration; it is required, use .elicits() when the "
        "tool asks nothing."
    )
    tool = create_mcp_tool("t").elicits().execute(noop)
    assert tool.elicits == {} and tool.parameters_model is NoParams


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "ünïcode"])
def test_tool_names_must_be_function_names(name: str) -> None:
    with pytest.raises(ToolDefinitionError, match="use 1-64 letters, digits, '_' or '-'"):
        create_mcp_tool(name)


def test_definition_mistakes_are_named() -> None:
    with pytest.raises(ToolDefinitionError, match="must be snake_case"):
        create_mcp_tool("t").elicits(PickFlight=PickHotel)
    with pytest.raises(
        ToolDefinitionError,
        match="response model of 'pick' must be a pydantic BaseModel subclass, got <class 'dict'>",
    ):
        create_mcp_tool("t").elicits(pick=dict)  # type: ignore[arg-type]
    with pytest.raises(
        ToolDefinitionError, match=r"\.parameters\(\) must be a pydantic BaseModel subclass"
    ):
        create_mcp_tool("t").parameters(str)  # type: ignore[type-var]

    def not_async(params: Any, ctx: Any) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="needs an async function"):
        create_mcp_tool("t").elicits().execute(not_async)


async def test_run_validates_params_then_calls_the_body() -> None:
    seen: list[BaseModel] = []

    async def body(params: TripParams, ctx: Any) -> str:
        seen.append(params)
        return params.city

    tool = create_mcp_tool("t").parameters(TripParams).elicits().execute(body)
    assert await tool.run({"city": "Oslo", "nights": "2"}, ctx=None) == "Oslo"
    assert seen == [TripParams(city="Oslo", nights=2)]
    with pytest.raises(InvalidToolParams) as info:
        await tool.run({"city": "Oslo"}, ctx=None)
    assert info.value.errors[0]["loc"] == ("nights",) and len(seen) == 1


def test_no_params_tools_refuse_unexpected_arguments() -> None:
    tool = create_mcp_tool("t").elicits().execute(noop)
    assert tool.validate_params({}) == NoParams()
    with pytest.raises(InvalidToolParams, match="surprise: Extra inputs are not permitted"):
        tool.validate_params({"surprise": 1})
