"""The process's plugin registry, built from ``settings.CHATBRIDGE_PLUGINS``."""

from __future__ import annotations

from functools import cache

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from chatbridge import McpTool, Plugin, PluginRegistry
from chatbridge.conf import setting

__all__ = ["build_registry", "get_registry", "get_ui_resources"]


@cache
def get_registry() -> PluginRegistry:
    """Every configured plugin, imported once per process."""
    return build_registry(setting("CHATBRIDGE_PLUGINS"))


def build_registry(dotted_paths: list[str]) -> PluginRegistry:
    """A registry of the plugins at ``dotted_paths`` (``CHATBRIDGE_PLUGINS``'s form)."""
    registry = PluginRegistry()
    for dotted in dotted_paths:
        try:
            plugin = import_string(dotted)
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"CHATBRIDGE_PLUGINS: cannot import {dotted!r}: {exc}"
            ) from exc
        if isinstance(plugin, McpTool) and isinstance(plugin.plugin, Plugin):
            plugin = plugin.plugin  # a create_tool tool carries its plugin
        if not isinstance(plugin, Plugin):
            raise ImproperlyConfigured(
                f"CHATBRIDGE_PLUGINS: {dotted!r} is a {type(plugin).__name__}, not a Plugin; "
                "point it at the object returned by make_plugin(...).build()."
            )
        registry.register(plugin)
    return registry


@cache
def get_ui_resources() -> dict[str, str]:
    """Every plugin's guest UI: ``ui://`` URI → template name."""
    resources: dict[str, str] = {}
    for plugin in get_registry():
        for uri, template in plugin.ui_resources.items():
            if resources.setdefault(uri, template) != template:
                raise ImproperlyConfigured(f"Two plugins serve the guest UI {uri!r}.")
    return resources
