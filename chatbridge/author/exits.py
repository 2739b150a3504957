"""What a question offers besides its answer: going back to change an earlier answer, and the two
ways of not answering, named by the tool's author (``.exits(key, ...)``).

*Decline* and *Cancel* mean what MCP says they mean (client/elicitation): **Decline** — the
person said no to this question; **Cancel** — they closed it without choosing. Both reach the
tool as its answer's ``action``; what happens next is the tool's decision, so only its author
can say it truthfully: ``.exits(REVIEW, decline=Exit("Don't book", "Ends the booking; nothing
is charged."), cancel=None)``. Without a declaration a question offers both, worded
``DEFAULT_DECLINE`` and ``DEFAULT_CANCEL``. ``None`` leaves a button out of the chat; an MCP
client may still send that action, and the tool handles it as it handles the other.

**Change** goes back to an earlier question of the same call and asks it again: the call forks
its journal at that question and runs on from there with the new answer
(``PluginSession.change``). Every earlier answer may be changed unless a step ran or the call
committed after it; ``change={PICK_SEAT: "Change seat"}`` names the ones a question offers and
their labels (``{}`` offers none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chatbridge.author.language import gettext, gettext_noop

__all__ = [
    "DEFAULT_CANCEL",
    "DEFAULT_DECLINE",
    "Change",
    "NO_DECLARED_EXITS",
    "Exit",
    "QuestionExits",
    "default_change_label",
    "offered",
]


@dataclass(frozen=True)
class Exit:
    """A way out of a question that is not an answer: its button's ``label`` and a ``hint``
    saying what it does (read by screen readers with the button). Text, or a lazy
    translation (Django's ``gettext_lazy``): it is said when the question is asked."""

    label: Any
    hint: Any = ""

    def said(self) -> Exit:
        """This exit in the active language, as text."""
        return Exit(gettext(str(self.label)), gettext(str(self.hint)) if self.hint else "")


DEFAULT_DECLINE = Exit(
    gettext_noop("Decline"),
    gettext_noop("Say no to this question: the tool is told you declined, and decides."),
)
DEFAULT_CANCEL = Exit(
    gettext_noop("Cancel"),
    gettext_noop("Close this question without answering: the tool is told, and decides."),
)


@dataclass(frozen=True)
class QuestionExits:
    """The exits one question offers (see the module docstring). ``change`` maps earlier keys
    to the labels of their Change buttons; ``None`` offers every earlier answer."""

    change: Mapping[str, Any] | None = None
    decline: Exit | None = DEFAULT_DECLINE
    cancel: Exit | None = DEFAULT_CANCEL


NO_DECLARED_EXITS = QuestionExits()


@dataclass(frozen=True, slots=True)
class Change:
    """An earlier answer the open question offers to change: its question's id (what a host
    sends back), key and the button's label."""

    elicit_id: str
    key: str
    label: str = field(compare=False)

    def to_dict(self) -> dict[str, str]:
        return {"question": self.elicit_id, "key": self.key, "label": self.label}


def offered(exits: QuestionExits, changes: tuple[Change, ...]) -> dict[str, Any]:
    """What a question offers besides an answer, as JSON: ``{"change": [{"question", "key",
    "label"}], "decline": {"label", "hint"} | None, "cancel": ...}`` (the chat's ``elicit``
    event, an MCP elicitation's ``_meta``)."""

    def said(value: Exit | None) -> dict[str, str] | None:
        return None if value is None else {"label": str(value.label), "hint": str(value.hint)}

    return {
        "change": [change.to_dict() for change in changes],
        "decline": said(exits.decline),
        "cancel": said(exits.cancel),
    }


def default_change_label(key: str) -> str:
    """ "Change pick seat" for ``pick_seat``: the label of a Change button nobody named."""
    return gettext("Change %(question)s") % {"question": key.replace("_", " ")}
