"""Links of URL questions are bearer tokens in a path (``/elicit/<token>/``): the server's
access log and Django's request log show the path with the token masked.

uvicorn's access lines and Django's request warnings are log records (a filter masks them);
daphne writes its access lines to a stream itself (its writer is wrapped). A reverse proxy in
front keeps its own log: mask ``/elicit/`` paths there too (see docs/production.md).
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from typing import Any

__all__ = ["LINK_TOKEN", "MaskLinkTokens", "install", "mask"]

LINK_TOKEN = re.compile(r"(/elicit/)[A-Za-z0-9_-]{8,}")
MASKED = r"\1[token]"
_LOGGERS = ("uvicorn.access", "django.request", "django.server")


def mask(text: str) -> str:
    """``text`` with the token of every question link replaced."""
    return LINK_TOKEN.sub(MASKED, text) if "/elicit/" in text else text


class MaskLinkTokens(logging.Filter):
    """Masks link tokens in a record's message and arguments (it never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = mask(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(mask(a) if isinstance(a, str) else a for a in record.args)
        return True


def install() -> None:
    """Mask tokens in the access and request logs of this process (once)."""
    masking = MaskLinkTokens()
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, MaskLinkTokens) for f in logger.filters):
            logger.addFilter(masking)
    if "daphne.access" in sys.modules:
        _mask_daphne()


def _mask_daphne() -> None:
    from daphne.access import AccessLogGenerator

    write = AccessLogGenerator.write_entry
    if getattr(write, "masks_link_tokens", False):
        return

    @functools.wraps(write)
    def write_entry(
        self: AccessLogGenerator, host: Any, date: Any, request: Any, *a: Any, **k: Any
    ) -> None:
        write(self, host, date, mask(request) if isinstance(request, str) else request, *a, **k)

    write_entry.masks_link_tokens = True  # type: ignore[attr-defined]
    AccessLogGenerator.write_entry = write_entry
