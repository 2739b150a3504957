"""The ChatBridge core: tools, elicitation, sessions, journal, plugins. No web imports."""

from __future__ import annotations

from chatbridge.core.auto_form import auto_form
from chatbridge.core.context import ToolContext
from chatbridge.core.elicit import (
    Accept,
    Cancel,
    Decline,
    ElicitAction,
    ElicitId,
    ElicitKey,
    ElicitMode,
    ElicitRequest,
    ElicitResult,
    ElicitSchema,
)
from chatbridge.core.events import SessionEvent
from chatbridge.core.exceptions import (
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
    ToolDefinitionError,
    UnknownElicitKey,
    UrlQuestionsUnavailable,
)
from chatbridge.core.guest_ui import guest_ui
from chatbridge.core.handoff import create_tool
from chatbridge.core.journal import JournalEntry
from chatbridge.core.links import UrlLinks, UrlPage, UrlQuestion
from chatbridge.core.manager import SessionManager
from chatbridge.core.plugins import (
    FormPost,
    Plugin,
    PluginContext,
    PluginRegistry,
    RenderSurface,
    Submission,
    make_plugin,
)
from chatbridge.core.rules import AnswerRefused, answer_rule
from chatbridge.core.sampling import SampleResult
from chatbridge.core.sessions import PluginSession, SessionInfo
from chatbridge.core.tools import McpTool, ToolHints, create_mcp_tool

__all__ = [
    "Accept",
    "AnswerRefused",
    "Cancel",
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
    "Submission",
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
