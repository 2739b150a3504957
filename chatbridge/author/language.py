"""The runtime's words in the person's language.

The runtime has no web imports, so it cannot call Django's ``gettext`` itself: its words go
through :func:`gettext` here, and the chat app installs Django's (``use_translator`` in
``ChatConfig.ready``), which answers in the language active where the words are made (the
request's, the socket's or the conversation's; English where none is, as for MCP clients).
Marked with ``_()`` (or ``gettext_noop`` for tables), so ``makemessages`` finds them.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["gettext", "gettext_noop", "use_translator"]


def _same(message: str) -> str:
    return message


_translator: Callable[[str], str] = _same


def use_translator(translate: Callable[[str], str]) -> None:
    """Make ``translate`` (Django's ``gettext``) say the runtime's words."""
    global _translator
    _translator = translate


def gettext(message: str) -> str:
    """``message`` in the active language (itself while no translator is installed)."""
    return _translator(message)


def gettext_noop(message: str) -> str:
    """Marks ``message`` for translation where it is defined; :func:`gettext` says it later."""
    return message
