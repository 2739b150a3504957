"""Paying on a URL question's page, as a person would: over HTTP on a real server, or through
``MemoryUrlLinks`` for in-process bridges (their links point at a ``.invalid`` origin)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx2

from chatbridge import SessionManager
from chatbridge.calls.links import MemoryUrlLinks

__all__ = ["CARD_FORM", "PAID", "pay", "with_pages"]

CARD_FORM = {
    "name": "Ada Lovelace",
    "number": "4242 4242 4242 4242",
    "expiry": "12/39",
    "cvc": "123",
}
_MEMORY: dict[str, tuple[MemoryUrlLinks, SessionManager]] = {}


def with_pages(manager: SessionManager) -> SessionManager:
    """``manager`` with in-memory URL links that ``pay`` can complete."""
    origin = f"http://pages-{len(_MEMORY)}.invalid"
    links = MemoryUrlLinks(origin)
    manager.url_links = links
    _MEMORY[origin] = (links, manager)
    return manager


PAID = {"payment_token": "tok_" + "x" * 20, "last4": "4242"}


async def pay(url: str, content: Mapping[str, Any] = PAID) -> str:
    """Complete the payment page at ``url`` with a test card; the page's text. In process,
    the page reports ``content`` (what book_flight's page would, by default)."""
    parts = urlsplit(url)
    memory = _MEMORY.get(f"{parts.scheme}://{parts.netloc}")
    if memory is not None:
        links, manager = memory
        token = parts.path.strip("/").split("/")[-1]
        await links.complete(token, content, manager)
        return "Completed on its page"
    async with httpx2.AsyncClient(timeout=30) as http:
        page = await http.get(url)
        page.raise_for_status()
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert match is not None, page.text
        done = await http.post(url, data={**CARD_FORM, "csrfmiddlewaretoken": match[1]})
        done.raise_for_status()
        return done.text
