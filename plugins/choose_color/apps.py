from __future__ import annotations

from django.apps import AppConfig


class ChooseColorConfig(AppConfig):
    name = "plugins.choose_color"
    label = "choose_color"
    verbose_name = "Choose a colour"
