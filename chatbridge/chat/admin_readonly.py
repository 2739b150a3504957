"""The admin's read-only base classes: records to look at, never to add, change or delete."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from chatbridge.chat.admin_display import NOTHING

__all__ = ["ADMIN_CSS", "ReadOnlyAdmin", "ReadOnlyInline"]

ADMIN_CSS = {"all": ("chatbridge/admin.css",)}


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A record to look at: no add, no change, no delete (no Save or Delete buttons)."""

    empty_value_display = NOTHING

    class Media:
        css = ADMIN_CSS

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    """Rows shown under a record, read-only like it."""

    empty_value_display = NOTHING
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
