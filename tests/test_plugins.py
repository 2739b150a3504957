"""Plugins: exhaustive handlers, the registry, and ctx.render's validate-and-retry loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from chatbridge import (
    Accept,
    AnswerRefused,
    Cancel,
    Decline,
    ElicitId,
    ElicitRequest,
    ElicitValidationError,
    FormPost,
    PluginContext,
    PluginDefinitionError,
    PluginRegistry,
    answer_rule,
    create_mcp_tool,
    make_plugin,
)
from chatbridge.author.exceptions import technical_errors
from tests.support import Confirm, PickHotel, Rating, trip_tool


async def choose_hotel(req: ElicitRequest, ctx: PluginContext) -> Any:
    return (await ctx.render("hotels.html", {"hotels": req.context["hotels"]})).result


async def confirm(req: ElicitRequest, ctx: PluginContext) -> Any:
    return Accept({"ok": True})


async def rate(req: ElicitRequest, ctx: PluginContext) -> Any:
    return Decline()


async def stay(params: Any, ctx: Any) -> None:
    return None


class ScriptedSurface:
    """Plays the user: answers each form with the next post, remembering what it was shown."""

    def __init__(self, *posts: FormPost) -> None:
        self.posts = list(posts)
        self.shown: list[tuple[str, dict[str, list[str]]]] = []
        self.contexts: list[dict[str, Any]] = []

    async def show(
        self, template: str, context: dict[str, Any], errors: dict[str, list[str]]
    ) -> FormPost:
        self.shown.append((template, errors))
        self.contexts.append(context)
        return self.posts.pop(0)


def request_for(key: str, model: Any, **context: Any) -> ElicitRequest:
    return ElicitRequest.build(
        ElicitId("plan_trip", key, "c1", 1), model, "Choose", context, {}, None
    )


def test_build_names_missing_and_extra_handlers() -> None:
    with pytest.raises(PluginDefinitionError) as info:
        make_plugin(trip_tool).on_elicit(pick_hotel=choose_hotel, pick_room=confirm).build()
    assert str(info.value) == (
        "Plugin for tool 'plan_trip': missing on_elicit handlers for confirm, rate; handlers "
        "for undeclared keys pick_room. Provide exactly one async handler per key declared in "
        ".elicits()."
    )
    assert (info.value.missing, info.value.extra) == (["confirm", "rate"], ["pick_room"])


def test_handlers_must_be_async_and_unique() -> None:
    def sync_handler(req: Any, ctx: Any) -> Any:
        return Cancel()

    with pytest.raises(
        PluginDefinitionError, match="the handler for 'rate' must be an async function"
    ):
        make_plugin(trip_tool).on_elicit(rate=sync_handler)
    with pytest.raises(PluginDefinitionError, match="two handlers for key 'rate'"):
        make_plugin(trip_tool).on_elicit(rate=rate).on_elicit(rate=rate)
    with pytest.raises(PluginDefinitionError, match="needs a tool from create_mcp_tool"):
        make_plugin("plan_trip")  # type: ignore[arg-type]


def test_registry_lookup_iteration_and_duplicates() -> None:
    plugin = (
        make_plugin(trip_tool)
        .on_elicit(pick_hotel=choose_hotel, confirm=confirm, rate=rate)
        .build()
    )
    registry = PluginRegistry()
    registry.register(plugin)
    assert registry.get("plan_trip") is plugin and registry.get("nope") is None
    assert registry.has("plan_trip") and not registry.has("nope") and "plan_trip" in registry
    assert list(registry) == [plugin] and len(registry) == 1
    assert registry.tools() == [trip_tool]
    with pytest.raises(PluginDefinitionError, match="already registered"):
        registry.register(plugin)
    with pytest.raises(PluginDefinitionError, match="needs a Plugin"):
        registry.register(trip_tool)


async def test_render_rerenders_invalid_posts_with_errors_until_valid() -> None:
    surface = ScriptedSurface(
        FormPost("accept", {"stars": "nine"}),
        FormPost("accept", {"stars": "7"}),
        FormPost("accept", {"stars": "4"}),
    )
    ctx = PluginContext(request_for("rate", Rating), surface)
    submission = await ctx.render("rate.html", {"scale": 5})
    assert submission.result == Accept(Rating(stars=4))
    assert (submission.data, submission.attempts) == ({"stars": "4"}, 3)
    # The form shows words for people; each keeps pydantic's text for the record.
    assert surface.shown == [
        ("rate.html", {}),
        ("rate.html", {"stars": ["Enter a number from 1 to 5"]}),
        ("rate.html", {"stars": ["Enter a number from 1 to 5"]}),
    ]
    assert [technical_errors(errors) for _, errors in surface.shown[1:]] == [
        {"stars": ["Input should be a valid integer, unable to parse string as an integer"]},
        {"stars": ["Input should be less than or equal to 5"]},
    ]
    assert surface.contexts[0]["scale"] == 5 and surface.contexts[0]["request"].key == "rate"


class ListedHotel(BaseModel):
    hotel: str

    @answer_rule("hotel")
    def _listed(cls, hotel: str, context: Mapping[str, Any]) -> None:
        if hotel not in context["hotels"]:
            raise AnswerRefused(f"{hotel} is not on the list.")


async def test_the_models_rules_rerender_with_the_questions_context() -> None:
    surface = ScriptedSurface(
        FormPost("accept", {"hotel": "Ritz"}), FormPost("accept", {"hotel": "B"})
    )
    request = request_for("pick_hotel", ListedHotel, hotels=["A", "B"])
    submission = await PluginContext(request, surface).render("hotels.html")
    assert submission.result == Accept(ListedHotel(hotel="B")) and submission.attempts == 2
    assert surface.shown[1] == ("hotels.html", {"hotel": ["Ritz is not on the list."]})


async def test_plugin_handle_checks_the_models_rules_of_what_a_handler_returns() -> None:
    async def careless(req: ElicitRequest, ctx: PluginContext) -> Any:
        return Accept({"hotel": "Ritz"})

    tool = create_mcp_tool("stay").elicits(pick_hotel=ListedHotel).execute(stay)
    plugin = make_plugin(tool).on_elicit(pick_hotel=careless).build()
    request = request_for("pick_hotel", ListedHotel, hotels=["A", "B"])
    with pytest.raises(ElicitValidationError, match="hotel: Ritz is not on the list."):
        await plugin.handle(request, PluginContext(request, ScriptedSurface()))


async def test_business_validation_rerenders_the_same_way() -> None:
    """``render(validate=...)``: kept for compatibility (rules belong in the model)."""
    taken = {"Grand Central"}
    surface = ScriptedSurface(
        FormPost("accept", {"hotel": "Grand Central"}), FormPost("accept", {"hotel": "Harbour Inn"})
    )
    ctx = PluginContext(request_for("pick_hotel", PickHotel), surface)

    async def free(answer: PickHotel) -> dict[str, str] | None:
        return {"hotel": f"{answer.hotel} is full"} if answer.hotel in taken else None

    submission = await ctx.render("hotels.html", validate=free)
    assert submission.result == Accept(PickHotel(hotel="Harbour Inn"))
    assert surface.shown[1] == ("hotels.html", {"hotel": ["Grand Central is full"]})


async def test_decline_and_cancel_end_the_form_without_validation() -> None:
    for action, expected in (("decline", Decline()), ("cancel", Cancel())):
        surface = ScriptedSurface(FormPost(action, {"stars": "garbage"}))  # type: ignore[arg-type]
        submission = await PluginContext(request_for("rate", Rating), surface).render("r.html")
        assert submission.result == expected and submission.attempts == 1


async def test_plugin_handle_validates_what_a_handler_returns() -> None:
    async def liar(req: ElicitRequest, ctx: PluginContext) -> Any:
        return Accept({"ok": "not a bool at all"})

    plugin = (
        make_plugin(trip_tool).on_elicit(pick_hotel=choose_hotel, confirm=liar, rate=rate).build()
    )
    request = request_for("confirm", Confirm)
    with pytest.raises(ElicitValidationError, match="ok: Input should be a valid boolean"):
        await plugin.handle(request, PluginContext(request, ScriptedSurface()))
    request = request_for("pick_hotel", PickHotel, hotels=["A", "B"])
    surface = ScriptedSurface(FormPost("accept", {"hotel": "B"}))
    assert await plugin.handle(request, PluginContext(request, surface)) == Accept(
        PickHotel(hotel="B")
    )
