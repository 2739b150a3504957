"""The project's settings with one tool whose description is Markdown, for the server of
tests/test_browser_markdown_stream.py: the offline model's help reply lists it, so asking for
help streams a Markdown reply (a heading, lists, emphasis, code, a table, links, hostile text)."""

from __future__ import annotations

from chatbridge.settings import *  # noqa: F403

CHATBRIDGE_PLUGINS = ["tests.markdown_plugin.markdown_plugin"]
