"""What Django's error pages and reports may show of a URL question's page.

Such a page takes what the chat must never see (a card number, its security code). Django
hides POST values marked sensitive only when DEBUG is off, so a developer's DEBUG page showed
them; this filter hides them whatever DEBUG says, with every local variable of the traceback
(a plugin's page may hold the card in a local it never marked sensitive).
"""

from __future__ import annotations

from types import FrameType
from typing import Any

from django.http import HttpRequest
from django.views.debug import SafeExceptionReporterFilter

__all__ = ["UrlPageReporterFilter"]


class UrlPageReporterFilter(SafeExceptionReporterFilter):
    """Always active: POST values marked sensitive and every frame's locals are hidden."""

    def is_active(self, request: HttpRequest | None) -> bool:
        return True

    def get_traceback_frame_variables(
        self, request: HttpRequest | None, tb_frame: FrameType
    ) -> Any:
        return [(name, self.cleansed_substitute) for name in tb_frame.f_locals]
