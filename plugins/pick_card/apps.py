from __future__ import annotations

from django.apps import AppConfig


class PickCardConfig(AppConfig):
    name = "plugins.pick_card"
    label = "pick_card"
    verbose_name = "Pick a card"
