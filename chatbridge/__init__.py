"""ChatBridge: write an interactive AI tool once, serve it in a web chat and over MCP.

The public API (DESIGN.md §1). Importing it pulls in no web framework: it comes from the
tool author's API (``chatbridge.author``) and the call runtime (``chatbridge.calls``).

The packages, by what they own:

- ``chatbridge.author``: what a tool author writes with (tools, keys, rules, plugins, forms);
- ``chatbridge.calls``: the call runtime (a session, its open question, its context, journal
  and outcome, the one drive loop);
- ``chatbridge.engine``: the chat engine (turns, the tool calls of a conversation, the chat's
  protocol), still without web imports;
- ``chatbridge.records``: persistence shared by the chat and MCP (the recorder, the ordered
  writer, a call's lease, the conversation store, URL questions' links, MCP tokens);
- ``chatbridge.chat``: the web app (the Django app ``chatbridge_chat``: models, sockets,
  pages, admin);
- ``chatbridge.mcp``: the MCP server; ``chatbridge.llm``: litellm and the offline model.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version

from chatbridge.author.auto_form import auto_form
from chatbridge.author.context import ToolContext
from chatbridge.author.elicit import (
    Accept,
    AnswerRefused,
    Cancel,
    Decline,
    ElicitAction,
    ElicitId,
    ElicitKey,
    ElicitMode,
    ElicitRequest,
    ElicitResult,
    ElicitSchema,
    answer_rule,
)
from chatbridge.author.exceptions import (
    ChangeRefused,
    ChatBridgeError,
    DuplicateSession,
    ElicitAlreadyPending,
    ElicitInBranch,
    ElicitNotPending,
    ElicitValidationError,
    InvalidToolParams,
    LinkUnusable,
    NotSerializable,
    PluginDefinitionError,
    ReplayDivergence,
    SamplingError,
    SessionAborted,
    SessionNotFound,
    StepOutcomeUnknown,
    ToolDefinitionError,
    TooManyRefusedAnswers,
    UnknownElicitKey,
    UrlQuestionsUnavailable,
)
from chatbridge.author.exits import Exit
from chatbridge.author.guest_ui import guest_ui
from chatbridge.author.handoff import create_tool
from chatbridge.author.plugins import (
    FormPost,
    Plugin,
    PluginContext,
    PluginRegistry,
    RenderSurface,
    Submission,
    UrlPage,
    UrlQuestion,
    make_plugin,
)
from chatbridge.author.sampling import SampleResult
from chatbridge.author.tools import McpTool, ToolHints, create_mcp_tool
from chatbridge.calls.events import SessionEvent
from chatbridge.calls.journal import JournalEntry
from chatbridge.calls.links import UrlLinks
from chatbridge.calls.manager import SessionManager
from chatbridge.calls.sessions import PluginSession, SessionInfo

DISTRIBUTION = "django-chatbridge"  # the name on the package index; the import name is chatbridge

try:
    __version__ = _distribution_version(DISTRIBUTION)
except PackageNotFoundError:  # a checkout on the path, not installed
    __version__ = "0+unknown"

__all__ = [
    "Accept",
    "AnswerRefused",
    "Cancel",
    "ChangeRefused",
    "ChatBridgeError",
    "Decline",
    "DuplicateSession",
    "ElicitAction",
    "ElicitAlreadyPending",
    "ElicitId",
    "ElicitKey",
    "ElicitMode",
    "ElicitInBranch",
    "ElicitNotPending",
    "ElicitRequest",
    "ElicitResult",
    "ElicitSchema",
    "Exit",
    "ElicitValidationError",
    "FormPost",
    "InvalidToolParams",
    "JournalEntry",
    "LinkUnusable",
    "McpTool",
    "ToolHints",
    "NotSerializable",
    "Plugin",
    "PluginContext",
    "PluginDefinitionError",
    "PluginRegistry",
    "PluginSession",
    "RenderSurface",
    "ReplayDivergence",
    "SampleResult",
    "SamplingError",
    "SessionAborted",
    "SessionEvent",
    "SessionInfo",
    "SessionManager",
    "SessionNotFound",
    "StepOutcomeUnknown",
    "Submission",
    "TooManyRefusedAnswers",
    "ToolContext",
    "ToolDefinitionError",
    "UnknownElicitKey",
    "UrlLinks",
    "UrlPage",
    "UrlQuestion",
    "UrlQuestionsUnavailable",
    "answer_rule",
    "auto_form",
    "create_mcp_tool",
    "create_tool",
    "guest_ui",
    "make_plugin",
]
