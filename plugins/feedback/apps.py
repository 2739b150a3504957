from __future__ import annotations

from django.apps import AppConfig


class FeedbackConfig(AppConfig):
    name = "plugins.feedback"
    label = "feedback"
    verbose_name = "Send feedback"
