"""``url_card``: how a chat shows a URL question (``ctx.elicit_url``): its message and a link
to the page that answers it, with Decline and Cancel.

The card never answers the question itself: the page does, and the session closes the card
when it has. An accept posted to the card (a forged form) is refused and the card shown again.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from chatbridge.author.elicit import ElicitRequest, ElicitResult
from chatbridge.author.language import gettext, gettext_noop
from chatbridge.author.plugins import FieldErrors, PluginContext

__all__ = ["DEFAULT_LINK_LABEL", "URL_CARD_TEMPLATE", "url_card"]

URL_CARD_TEMPLATE = "chatbridge/url_question.html"
DEFAULT_LINK_LABEL = gettext_noop("Continue")
ON_ITS_PAGE = gettext_noop("Open the link to answer this question on its page.")


async def url_card(request: ElicitRequest, ctx: PluginContext) -> ElicitResult[Any]:
    """Show the link of a URL question; return only the user's Decline or Cancel."""
    url = request.url or ""
    label = request.context.get("link_label")
    page = {
        "url": url,
        "host": urlsplit(url).netloc,
        "link_label": label if isinstance(label, str) and label else gettext(DEFAULT_LINK_LABEL),
    }
    refusal: FieldErrors = {"__all__": [gettext(ON_ITS_PAGE)]}
    submission = await ctx.render(URL_CARD_TEMPLATE, page, precheck=lambda data: refusal)
    return submission.result
