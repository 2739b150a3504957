from __future__ import annotations

from django.apps import AppConfig


class BookFlightConfig(AppConfig):
    name = "plugins.book_flight"
    label = "book_flight"
    verbose_name = "Book a flight"
