"""A tool whose description is Markdown (tests/markdown_settings.py serves it)."""

from __future__ import annotations

from typing import Any

from chatbridge import create_mcp_tool, make_plugin

# The help reply is "I'm the offline assistant. I can use these tools:\n- show_notes: " then
# this, then "\nAsk in your own words, for example: ...": one reply with every construct, and
# the hostile text of tests/test_browser_security.py.
DESCRIPTION = (
    "Shows **travel notes** with _emphasis_ and ~~old~~ text.\n\n"
    "## Packing list\n\n"
    "1. A **charger** for the phone\n"
    "2. The `boarding pass`\n"
    "3. Water, *refilled* past security\n\n"
    "```python\n"
    "def cheapest(flights):\n"
    "    return min(flights, key=lambda f: f.price)\n"
    "```\n\n"
    "| Flight | Price |\n"
    "|---|--:|\n"
    "| CB101 | $199 |\n"
    "| CB205 | $249 |\n\n"
    '<script>alert("s")</script> <img src=x onerror=alert("i")> '
    '<a hx-get="/hx-probe" hx-trigger="load">x</a> <a href="javascript:alert(1)">j</a> '
    "[j](javascript:alert(2)) <!-- a comment -->\n\n"
    "See [the airline](https://airline.example) before you go."
)


async def _notes(params: Any, ctx: Any) -> None:
    return None


notes_tool = create_mcp_tool("show_notes").description(DESCRIPTION).elicits().execute(_notes)
markdown_plugin = make_plugin(notes_tool).build()
