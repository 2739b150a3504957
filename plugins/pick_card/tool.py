"""pick_card, written with ``create_tool``: ``before`` deals, ``client`` shows, ``after`` tells."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import pgettext_lazy
from pydantic import BaseModel, Field, field_validator

from chatbridge import AnswerRefused, PluginContext, Submission, answer_rule, create_tool

__all__ = ["PickCardParams", "PickedCard", "card_name", "deal", "pick_card", "spoken_name"]

RANKS = ("A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K")
RANK_NAMES = {"A": "Ace", "J": "Jack", "Q": "Queen", "K": "King"}
SUITS = {"S": ("♠", "spades"), "H": ("♥", "hearts"), "D": ("♦", "diamonds"), "C": ("♣", "clubs")}
# The same words for the person at the table (``card_name`` stays English: it is the tool's data).
RANK_WORDS = {
    "A": pgettext_lazy("playing card", "Ace"),
    "J": pgettext_lazy("playing card", "Jack"),
    "Q": pgettext_lazy("playing card", "Queen"),
    "K": pgettext_lazy("playing card", "King"),
}
SUIT_WORDS = {
    "S": pgettext_lazy("playing cards", "spades"),
    "H": pgettext_lazy("playing cards", "hearts"),
    "D": pgettext_lazy("playing cards", "diamonds"),
    "C": pgettext_lazy("playing cards", "clubs"),
}


class PickCardParams(BaseModel):
    count: int = Field(5, ge=1, le=13, description="How many cards to deal")


class PickedCard(BaseModel):
    card: str = Field(min_length=2, max_length=3, description="Code of the picked card, e.g. QH")

    @answer_rule("card")
    def _dealt(cls, card: str, context: Mapping[str, Any]) -> None:
        if card not in {dealt["code"] for dealt in context["cards"]}:
            raise AnswerRefused(_("Pick one of the cards on the table."))

    @field_validator("card")
    @classmethod
    def _a_card(cls, card: str) -> str:
        """Always on (also without a question): a malformed code never reaches ``card_name``."""
        if card[:-1] not in RANKS or card[-1:] not in SUITS:
            raise AnswerRefused(
                _("%(card)s is not a card; codes look like QH or 10S.") % {"card": repr(card)}
            )
        return card


def card_name(code: str) -> str:
    rank, suit = code[:-1], code[-1]
    return f"{RANK_NAMES.get(rank, rank)} of {SUITS[suit][1]}"


def spoken_name(code: str) -> str:
    """``card_name`` in the active language: the card's accessible name on the table."""
    rank, suit = code[:-1], code[-1]
    # Translators: a playing card, e.g. "Queen of hearts" or "7 of clubs".
    return _("%(rank)s of %(suit)s") % {
        "rank": RANK_WORDS.get(rank, rank),
        "suit": SUIT_WORDS[suit],
    }


def _card(code: str) -> dict[str, Any]:
    rank, suit = code[:-1], code[-1]
    return {
        "code": code,
        "rank": rank,
        "suit": SUITS[suit][0],
        "name": card_name(code),
        "red": suit in "HD",
    }


def deal(params: PickCardParams) -> dict[str, Any]:
    """Deal ``count`` random cards (run as a recorded step: a replay deals the same hand)."""
    deck = [f"{rank}{suit}" for suit in SUITS for rank in RANKS]
    return {"cards": [_card(code) for code in random.sample(deck, params.count)]}


async def show_cards(context: dict[str, Any], ctx: PluginContext) -> Submission[Any]:
    # The dealt cards are the call's data (English names); the table says them in the
    # person's language.
    cards = [{**card, "spoken": spoken_name(card["code"])} for card in context["cards"]]
    return await ctx.render("pick_card/cards.html", {"cards": cards})


def tell(context: dict[str, Any], answer: dict[str, Any]) -> str:
    return f"You picked the {card_name(answer['card'])}."


pick_card = (
    create_tool("pick_card")
    .description("Deal some playing cards face up and let the user pick one.")
    .example("Pick a card")
    .parameters(PickCardParams)
    .handoff(before=deal, client=show_cards, after=tell, message="Pick a card", answer=PickedCard)
    .build()
)
