"""MCP Apps (``io.modelcontextprotocol/ui``, spec 2026-01-26): guest UIs as apps of their tools.

A tool whose question is delegated to a guest UI (DESIGN §7) lists ``_meta.ui.resourceUri``;
the host renders the ``ui://`` page next to the call. The call itself waits for an answer, and
MCP Apps gives a view exactly one way to reach the server: ``tools/call``, proxied by its host
over the same MCP session. So the view reads the open question and answers it through two
app-only tools (``_meta.ui.visibility: ["app"]``, hidden from the model):

- ``_ui_question`` → the open question of the call: message, context, schema, and the refusal
  of the last answer, if any (structured content).
- ``_ui_answer {action, content}`` → the answer, validated like every other answer; a refused
  one comes back as an error result with the reason, and the question stays open. With
  ``change`` (an earlier question's id or key, one of ``_ui_question``'s ``exits``), no
  answer: that question is asked again (``chatbridge.mcp.exits_wire``).

A view names its call by ``call`` (``hostContext.toolInfo.id``, the JSON-RPC id of the
``tools/call``) when its host tells it; otherwise the one open question of a UI in the same
MCP session is meant. Only calls held open on this MCP session (legacy, pushed or ``_respond``)
are found: a 2026-07-28 call has no session to find it by, and its host answers the form.

The server declares the extension (``capabilities.extensions["io.modelcontextprotocol/ui"]``)
and, as the spec asks, checks the client's: only a client that negotiated it with the
``text/html;profile=mcp-app`` MIME type sees ``_meta.ui`` and the app-only tools (and may call
them). Every other client gets the text-only variant of the same tools: the question comes as
a form, its context (default colour, theme) in ``x-model-context`` (SEP-2133 degradation).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import mcp_types as types
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID, client_supports_apps
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from chatbridge.author.elicit import ElicitRequest
from chatbridge.calls.sessions import PluginSession
from chatbridge.mcp.exits_wire import CHANGE_META, exits_meta
from chatbridge.mcp.hosts import deliver, errors_text, from_wire, refused_too_often
from chatbridge.mcp.results import error_of

__all__ = [
    "ANSWER_TOOL",
    "APP_MIME_TYPE",
    "EXTENSION_ID",
    "APP_TOOLS",
    "QUESTION_TOOL",
    "RESOURCE_UI_META",
    "answer",
    "app_tools",
    "input_schema",
    "question",
    "require_apps",
    "supports_apps",
]

QUESTION_TOOL = "_ui_question"
ANSWER_TOOL = "_ui_answer"
HELD_OPEN = ("mcp-push", "mcp-respond")  # transports whose call waits on this MCP session
# What every guest page needs from a host: no network, no frames, a border around it.
RESOURCE_UI_META: dict[str, Any] = {"csp": {}, "prefersBorder": True}

_CALL = {
    "type": ["string", "integer"],
    "description": "hostContext.toolInfo.id: the JSON-RPC id of the tools/call that shows the app",
}
APP_TOOLS: dict[str, dict[str, Any]] = {  # name → description and input schema
    QUESTION_TOOL: {
        "description": "The open question of the call this app belongs to.",
        "schema": {"type": "object", "properties": {"call": _CALL}},
    },
    ANSWER_TOOL: {
        "description": "Answer the open question of the call this app belongs to.",
        "schema": {
            "type": "object",
            "properties": {
                "call": _CALL,
                "action": {"type": "string", "enum": ["accept", "decline", "cancel"]},
                "content": {"type": "object", "description": "The answer (for accept)"},
                "change": {
                    "type": "string",
                    "maxLength": 300,
                    "description": "Instead of an answer: the earlier question to answer "
                    "again (an id or key from _ui_question's exits.change)",
                },
            },
            "required": ["action"],
        },
    },
}
NO_QUESTION = "There is no open question for this app to answer."
SEVERAL = (
    "Several calls of this session wait for an app's answer; "
    "name the call with the toolInfo.id of the host context."
)


def supports_apps(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's client negotiated MCP Apps (with the mcp-app MIME type)."""
    return client_supports_apps(ctx)


def require_apps(ctx: ServerRequestContext[Any, Any], name: str) -> None:
    """Refuse an app-only tool to a client that did not negotiate MCP Apps: -32021 with the
    capability it lacks on 2026-07-28, invalid params before (no such code there)."""
    if supports_apps(ctx):
        return
    message = (
        f"{name!r} is a tool of MCP Apps views: declare the {EXTENSION_ID!r} extension with "
        f"mimeTypes [{APP_MIME_TYPE!r}] in the client capabilities to use it."
    )
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        needed = {"extensions": {EXTENSION_ID: {"mimeTypes": [APP_MIME_TYPE]}}}
        raise MCPError(
            types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message,
            data={"requiredCapabilities": needed},
        )
    raise MCPError(types.INVALID_PARAMS, message)


def input_schema(name: str) -> dict[str, Any]:
    """The input schema of the app-only tool ``name``."""
    schema: dict[str, Any] = APP_TOOLS[name]["schema"]
    return schema


def app_tools(resource_uri: str) -> list[types.Tool]:
    """The app-only tools, listed with the first guest UI's resource (hosts scope them)."""
    return [
        types.Tool(
            name=name,
            description=spec["description"],
            input_schema=spec["schema"],
            _meta={"ui": {"resourceUri": resource_uri, "visibility": ["app"]}},
        )
        for name, spec in APP_TOOLS.items()
    ]


def _find(
    sessions: Iterable[PluginSession | None], client: str, caller: str, call: Any
) -> tuple[PluginSession, ElicitRequest] | str:
    """The session whose guest-UI question this app answers, or why there is none."""
    found = [
        (s, s.pending)
        for s in sessions
        if s is not None
        and s.pending is not None
        and s.pending.ui
        and s.meta.get("transport") in HELD_OPEN
        and (s.meta.get("client"), s.meta.get("caller", "")) == (client, caller)
        and (call is None or s.meta.get("rpc_id") == str(call))
    ]
    if not found:
        return NO_QUESTION
    if len(found) > 1:
        return SEVERAL
    session, request = found[0]
    assert request is not None
    return session, request


def question(
    sessions: Iterable[PluginSession | None],
    client: str,
    caller: str,
    arguments: dict[str, Any],
    flat: dict[str, dict[str, dict[str, Any]]],
) -> types.CallToolResult:
    """``_ui_question``: the open question, with the last refusal."""
    found = _find(sessions, client, caller, arguments.get("call"))
    if isinstance(found, str):
        return error_of(found)
    session, request = found
    ui_context = (request.ui or {}).get("context") or {}
    refused = session.question.error if session.question is not None else None
    structured = {
        "message": request.message,
        "key": request.key,
        "schema": flat[request.tool_name][request.key],
        "context": {**ui_context, **request.context},
        "error": errors_text(refused) if refused else None,
        "exits": exits_meta(request),
    }
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=request.message)],
        structured_content=structured,
    )


async def answer(
    sessions: Iterable[PluginSession | None], client: str, caller: str, arguments: dict[str, Any]
) -> types.CallToolResult:
    """``_ui_answer``: deliver the app's answer; a refusal is an error result with the reason."""
    found = _find(sessions, client, caller, arguments.get("call"))
    if isinstance(found, str):
        return error_of(found)
    session, request = found
    content = arguments.get("content")
    action = str(arguments.get("action", ""))
    change = arguments.get("change")
    meta = {CHANGE_META: change} if isinstance(change, str) else None
    note = await deliver(
        session, request, from_wire(action, content if isinstance(content, dict) else {}, meta)
    )
    note = note or refused_too_often(session, request)  # its last refused answer: closed
    if note:
        return error_of(note)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="Answer received.")],
        structured_content={"accepted": True, "action": action},
    )
