"""Pages."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from chatbridge.chat.registry import get_registry
from chatbridge.core.schema import FieldInfo, describe_fields


@dataclass(frozen=True)
class Surface:
    key: str
    model: str
    fields: list[FieldInfo]


@dataclass(frozen=True)
class ToolCard:
    name: str
    description: str
    parameters: list[FieldInfo]
    surfaces: list[Surface]


@require_safe
def home(request: HttpRequest) -> HttpResponse:
    """The registered tools, their parameters and what each may ask the user."""
    cards = [
        ToolCard(
            name=plugin.name,
            description=plugin.tool.description,
            parameters=describe_fields(plugin.tool.parameters_schema),
            surfaces=[
                Surface(key, model.__name__, describe_fields(model.model_json_schema()))
                for key, model in plugin.tool.elicits.items()
            ],
        )
        for plugin in get_registry()
    ]
    return render(request, "chatbridge/home.html", {"tools": cards})
