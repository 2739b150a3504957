"""Which elicitation modes a client takes, and what a call tells one that cannot take a question.

client/elicitation (2025-11-25, 2026-07-28): a client declares ``elicitation: {form: {}, url:
{}}`` or either alone; an empty ``elicitation: {}`` means form only (how 2025-06-18 clients
declare it). URL mode exists from 2025-11-25 on, but a client that names the modes is read by
them whatever version it negotiated. Servers MUST NOT send a mode the client did not declare.
Which mode a call needs is known only when the tool asks (``ctx.elicit`` or
``ctx.elicit_url``), so a question this client cannot take ends the call there with an error
result that names what to declare; the session is aborted, so nothing waits for an answer that
cannot come.

URLElicitationRequiredError (-32042, 2025-11-25 only) is not used: it asks a client that *can*
take URL mode to complete links before retrying a request, for servers that cannot push; we push
(legacy) or return the link in ``inputRequests`` (2026-07-28).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import mcp_types as types
from mcp.server.context import ServerRequestContext

from chatbridge.author.exceptions import ChatBridgeError
from chatbridge.calls.outcome import BY_REFUSED

__all__ = [
    "MODES_META",
    "REFUSED_BY",
    "Mode",
    "ModeNotDeclared",
    "declared_modes",
    "modes_in",
    "modes_of",
]

Mode = Literal["form", "url"]
REFUSED_BY = BY_REFUSED  # aborted_by of a call stopped by ModeNotDeclared: its reason is its result
MODES_META = "elicitation_modes"  # session meta: the modes of the request that made the call


class ModeNotDeclared(ChatBridgeError):  # noqa: N818 - reads as the situation, like ClientGone
    """The tool asked a question in a mode this client did not declare."""

    def __init__(self, tool: str, mode: str, declared: frozenset[str]) -> None:
        self.tool, self.mode = tool, mode
        have = " and ".join(f"{m} mode" for m in sorted(declared)) or "no elicitation"
        what = "on a web page (URL mode)" if mode == "url" else "in a form (form mode)"
        need = "elicitation.url" if mode == "url" else "elicitation.form"
        hint = " (URL mode needs protocol 2025-11-25 or later)" if mode == "url" else ""
        super().__init__(
            f"Tool {tool!r} needs an answer {what}, and this client declared {have}. Declare "
            f"the {need} capability{hint} to use this tool; the call was stopped."
        )


def declared_modes(capabilities: types.ClientCapabilities | None) -> frozenset[str]:
    """The elicitation modes ``capabilities`` declare.

    The sub-capabilities decide on every protocol version: 2025-06-18 defines only
    ``elicitation: {}``, but a client that negotiated it and still names ``form``/``url`` says
    exactly what it takes (the TypeScript SDK sends ``{url: {}}`` whatever it negotiated), so
    reading such a client by its version would make a URL-only client declare nothing.
    """
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return frozenset()
    form, url = elicitation.form is not None, elicitation.url is not None
    if not form and not url:
        return frozenset({"form"})  # `elicitation: {}`: form only (backwards compatibility)
    return frozenset(m for m, on in (("form", form), ("url", url)) if on)


def modes_of(ctx: ServerRequestContext[Any, Any]) -> frozenset[str]:
    """The elicitation modes of the client making this request."""
    return declared_modes(ctx.session.client_capabilities)


def modes_in(meta: Mapping[str, str]) -> frozenset[str]:
    """The modes a call's meta records (``MODES_META``, comma-separated); every mode for a
    call recorded without them."""
    recorded = meta.get(MODES_META)
    if recorded is None:
        return frozenset({"form", "url"})
    return frozenset(m for m in recorded.split(",") if m)
