"""Django admin: conversations, tool sessions with their journal, live sessions, abort.

Everything here is read-only (it is the record of what happened); the one thing an operator
does is abort live sessions, always through a confirmation page that asks for a reason. Django
imports this module; each ``admin_*`` module beside it registers its models:

- ``admin_conversations``: conversations with their messages, queue and tool calls;
- ``admin_sessions``: tool sessions with their journal; ``admin_live``: the live sessions page
  and the abort;
- ``admin_elicit_links``: the one-time links of URL questions;
- ``mcp_token_admin``: users' MCP tokens;
- ``admin_readonly`` and ``admin_display``: the read-only base classes and how values show.
"""

from __future__ import annotations

from chatbridge.chat import mcp_token_admin  # noqa: F401  (registers the MCP tokens' admin)
from chatbridge.chat.admin_conversations import ConversationAdmin
from chatbridge.chat.admin_elicit_links import ElicitLinkAdmin
from chatbridge.chat.admin_live import AbortForm, LiveSessionsAdmin
from chatbridge.chat.admin_readonly import ReadOnlyAdmin, ReadOnlyInline
from chatbridge.chat.admin_sessions import ToolSessionAdmin

__all__ = [
    "AbortForm",
    "ConversationAdmin",
    "ElicitLinkAdmin",
    "LiveSessionsAdmin",
    "ReadOnlyAdmin",
    "ReadOnlyInline",
    "ToolSessionAdmin",
]
