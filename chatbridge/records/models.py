"""The tables of ChatBridge: conversations and their messages (owned by a browser session or a
user), tool calls and their journals, URL questions' links, MCP tokens, workers' heartbeats.

They belong to the Django app ``chatbridge.chat`` (its label, ``chatbridge_chat``, and its
migrations), which imports them in its ``models`` module; they live here, under the
persistence layer, so that what records and the cluster do never imports the chat's pages."""

from __future__ import annotations

import uuid
from datetime import datetime
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db import models
from django.utils.translation import gettext, gettext_noop

from chatbridge.calls.journal import RAISED
from chatbridge.calls.outcome import Outcome
from chatbridge.engine.conversation import as_llm_message

# The Django app the tables belong to (``chatbridge.chat.apps.ChatConfig``).
APP_LABEL = "chatbridge_chat"

# The title a chat has until its first message names it (stored as is; shown translated).
UNTITLED = gettext_noop("New chat")


class Conversation(models.Model):
    """A chat: its owner, title and the engine phase it is in."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.CharField(max_length=80, db_index=True, help_text="user:<id> or session:<key>")
    title = models.CharField(max_length=120, default=UNTITLED)
    phase = models.CharField(max_length=40, default="idle")
    turn_worker = models.CharField(
        max_length=120, blank=True, default="", help_text="the worker running a turn (a lease)"
    )
    turn_expires = models.DateTimeField(null=True, blank=True)
    turn_address = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="the client address (an IPv6 /64) that started the running turn",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = APP_LABEL
        ordering = ["-updated_at"]
        # Caps per visitor count on these: chats started lately, and chats running a turn;
        # the cap per client address, on the chats its turns run in.
        indexes = [
            models.Index(fields=["owner", "created_at"], name="conversation_owner_age"),
            models.Index(fields=["owner", "turn_expires"], name="conversation_owner_turn"),
            models.Index(fields=["turn_address", "turn_expires"], name="conversation_address_turn"),
        ]

    def __str__(self) -> str:
        return f"{self.title} ({self.id})"

    @property
    def shown_title(self) -> str:
        """The title as the reader sees it: "New chat" in their language until it has one."""
        return gettext(UNTITLED) if self.title == UNTITLED else self.title

    @cached_property
    def stopped_replies(self) -> set[str]:
        """Ids of the replies the user stopped (the page marks them)."""
        return set(self.messages.filter(stopped=True).values_list("id", flat=True))


class QueueEntry(models.Model):
    """A message sent while a turn ran ("Send anyway"), waiting to start the next turn.

    One row per message, so queuing one is one INSERT whatever the queue holds; ``owner``
    repeats the conversation's so the cap per visitor is counted on one index, and ``address``
    (the sender's) the cap per client address.
    """

    conversation = models.ForeignKey(Conversation, related_name="queued", on_delete=models.CASCADE)
    owner = models.CharField(max_length=80, db_index=True, help_text="the conversation's owner")
    message_id = models.CharField(
        max_length=64, unique=True, help_text="the id the message gets in the conversation"
    )
    text = models.TextField()
    client_id = models.CharField(max_length=100, blank=True, default="")
    address = models.CharField(
        max_length=64, blank=True, default="", db_index=True, help_text="the sender's address"
    )
    created_at = models.DateTimeField()

    class Meta:
        app_label = APP_LABEL
        ordering = ["conversation", "id"]
        verbose_name_plural = "queue entries"

    def __str__(self) -> str:
        return f"queued {self.message_id}"


class WorkerHeartbeat(models.Model):
    """A worker process says it is alive: calls it holds are taken over only once it stops."""

    worker = models.CharField(primary_key=True, max_length=120)
    beat_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.worker} at {self.beat_at:%H:%M:%S}"

    class Meta:
        app_label = APP_LABEL


class Message(models.Model):
    """One message in OpenAI form: user, assistant (maybe with tool calls) or tool result."""

    ROLES = [("user", "user"), ("assistant", "assistant"), ("tool", "tool"), ("system", "system")]

    id = models.CharField(primary_key=True, max_length=64)
    conversation = models.ForeignKey(
        Conversation, related_name="messages", on_delete=models.CASCADE
    )
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=ROLES)
    content = models.TextField(blank=True, default="")
    tool_calls = models.JSONField(null=True, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True, default="")
    stopped = models.BooleanField(
        default=False, help_text="a reply the user stopped: its content is what was shown"
    )
    outcome = models.JSONField(
        null=True,
        blank=True,
        help_text="a tool message's call as it ended (chatbridge.calls.outcome): what its card "
        "shows when the call has no session row (it never started, or retention removed it)",
    )
    abandoned = models.PositiveIntegerField(
        default=0,
        help_text="0 in the conversation the model reads; n: left by the conversation's n-th "
        "fork (a message edited and sent again, a reply regenerated), kept readable",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = APP_LABEL
        ordering = ["conversation", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "seq"], name="message_seq_unique")
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.seq}"

    def as_llm_message(self) -> dict[str, Any]:
        return as_llm_message(self.role, self.content, self.tool_calls, self.tool_call_id)


ACTIVE_STATUSES = ("running", "awaiting_elicit", "awaiting_sample")
FINAL_PHASE = "done"  # the phase of an ended call (completed, failed or aborted)


# The pending-question columns of a row with no question open.
NO_PENDING: dict[str, Any] = {
    "pending_key": "",
    "pending_elicit_id": "",
    "pending_message": "",
    "pending_context": None,
    "pending_schema": None,
    "pending_since": None,
}


def aborted_row(*, by: str, error: str, now: datetime, outcome: Outcome) -> dict[str, Any]:
    """The columns of a session row marked aborted where no tool is left to record it (an
    operator's abort of an orphan, a task ended on record): final, and no question open."""
    return {
        "status": "aborted",
        "phase": FINAL_PHASE,
        "error": error,
        "outcome": outcome.model_dump(mode="json"),
        "aborted_by": by,
        "aborted_at": now,
        "ended_at": now,
        "updated_at": now,
        **NO_PENDING,
    }


class ToolSession(models.Model):
    """One tool call, kept in step with its live ``PluginSession``."""

    STATUSES = [
        (s, s)
        for s in ("running", "awaiting_elicit", "awaiting_sample", "completed", "failed", "aborted")
    ]

    id = models.CharField(primary_key=True, max_length=200, help_text="the tool call id")
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, related_name="tool_sessions", on_delete=models.CASCADE
    )
    tool_name = models.CharField(max_length=64, db_index=True)
    arguments = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=STATUSES, default="running", db_index=True)
    phase = models.CharField(max_length=40, blank=True, default="")
    pending_key = models.CharField(max_length=64, blank=True, default="")
    pending_elicit_id = models.CharField(max_length=300, blank=True, default="")
    pending_message = models.TextField(blank=True, default="")
    pending_context = models.JSONField(null=True, blank=True)
    pending_schema = models.JSONField(null=True, blank=True)
    pending_since = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=120, blank=True, default="")
    transport = models.CharField(
        max_length=20, blank=True, default="chat", help_text="chat, mcp-push, mcp-mrtr, mcp-respond"
    )
    client = models.CharField(
        max_length=200, blank=True, default="", help_text="the MCP session id or caller digest"
    )
    meta = models.JSONField(
        default=dict,
        blank=True,
        help_text="where the call came from (origin, declared elicitation modes): a call "
        "resumed elsewhere keeps them",
    )
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    outcome = models.JSONField(
        null=True,
        blank=True,
        help_text="how the call ended, as a value (chatbridge.calls.outcome): completed, "
        "declined, cancelled, denied, aborted by whom and why, or failed",
    )
    logs = models.JSONField(
        default=list, blank=True, help_text="the call's last log lines: level, message, data"
    )
    progress = models.JSONField(
        null=True, blank=True, help_text="the call's latest progress: message, progress, total"
    )
    aborted_by = models.CharField(max_length=150, blank=True, default="")
    abort_reason = models.CharField(
        max_length=300,
        blank=True,
        default="",
        help_text="the reason an operator gave, as typed (the user reads it)",
    )
    aborted_at = models.DateTimeField(null=True, blank=True)
    committed = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="the key whose answer committed the call (a payment): no abort ends it silently",
    )
    commitment = models.JSONField(
        null=True,
        blank=True,
        help_text="a request to stop made after the commitment, and what became of the "
        "commitment: finished, compensated (with the compensation's result) or not",
    )
    resumes = models.PositiveIntegerField(
        default=0, help_text="times the call was resumed by replaying its journal"
    )
    changes = models.PositiveIntegerField(
        default=0,
        help_text="times an earlier answer was changed (the journal forked: the entries "
        "after it are kept, abandoned)",
    )
    last_resumed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = APP_LABEL
        ordering = ["-created_at"]
        # The retention policy deletes ended calls by age: found on this index, in batches.
        indexes = [models.Index(fields=["ended_at"], name="toolsession_ended")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.id} ({self.status})"

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    def journal_entries(self) -> list[dict[str, Any]]:
        """The recorded journal in ``seq`` order: what a replay of this call starts from.

        Rows written before scopes existed have no ``pos``: they go out without scope, pos
        and digest, which ``Journal`` reads as the tool body's entries in ``seq`` order.
        Abandoned rows (a change of an earlier answer) go out marked so: never replayed, they
        count in the numbers of later questions. A step whose start is on record and whose
        result is not (the run was interrupted) goes out marked ``started``.
        """
        rows = self.journal.filter(
            models.Q(result__isnull=False)
            | models.Q(abandoned__gt=0)
            | models.Q(kind="step", pos__isnull=False)
        )
        return [r.entry() for r in rows]


class JournalRecord(models.Model):
    """One capability call of a tool session: request, result, rejected answers, timings."""

    KINDS = [("elicit", "elicit"), ("sample", "sample"), ("step", "step")]

    session = models.ForeignKey(ToolSession, related_name="journal", on_delete=models.CASCADE)
    seq = models.PositiveIntegerField(help_text="global order of recording within the call")
    scope = models.CharField(
        max_length=200, blank=True, default="", help_text='branch path: "" is the tool body'
    )
    pos = models.PositiveIntegerField(
        null=True, blank=True, help_text="position within the scope (empty on old rows)"
    )
    digest = models.CharField(
        max_length=64, blank=True, default="", help_text="sha256 of the request"
    )
    kind = models.CharField(max_length=10, choices=KINDS)
    key = models.CharField(max_length=100)
    elicit_id = models.CharField(max_length=300, blank=True, default="", db_index=True)
    request = models.JSONField(default=dict)
    result = models.JSONField(null=True, blank=True)
    rejected = models.JSONField(
        default=list, blank=True, help_text="answers refused before this one: data and errors"
    )
    requested_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)
    abandoned = models.PositiveIntegerField(
        default=0,
        help_text="0 on the call's live branch; n: left by the call's n-th change of an "
        "earlier answer (kept for operators, never replayed)",
    )

    class Meta:
        app_label = APP_LABEL
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="journal_seq_unique"),
            # A call's slot is written once on its live branch: a second writer (a stale
            # worker) fails here. Abandoned rows leave their slot to the new branch.
            models.UniqueConstraint(
                fields=["session", "scope", "pos"],
                condition=models.Q(abandoned=0),
                name="journal_live_slot_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.seq}. {self.kind} {self.key}"

    def entry(self) -> dict[str, Any]:
        """This record as a journal entry (``JournalEntry.from_dict`` reads it)."""
        data: dict[str, Any] = {
            "seq": self.seq,
            "kind": self.kind,
            "key": self.key,
            "result": self.result,
        }
        if self.pos is not None:
            data.update(scope=self.scope, pos=self.pos, digest=self.digest or None)
        if self.abandoned:
            data["abandoned"] = self.abandoned
        elif self.kind == "step" and (self.result is None or RAISED in self.result):
            data["started"] = True  # no result: interrupted, or its function raised
        return data

    @property
    def latency_seconds(self) -> float | None:
        if self.answered_at is None:
            return None
        return (self.answered_at - self.requested_at).total_seconds()


class ElicitLink(models.Model):
    """The one-time link of a URL question (``ctx.elicit_url``) and what its page reported.

    Only a hash of the token is kept; the token itself is derived from the secret key and
    ``nonce``, so the same question hands out the same link until it expires.
    """

    elicit_id = models.CharField(max_length=300, unique=True)
    call_id = models.CharField(max_length=200, db_index=True)
    tool_name = models.CharField(max_length=64)
    key = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True, help_text="sha256 of the token")
    nonce = models.CharField(max_length=32)
    message = models.TextField(blank=True, default="")
    context = models.JSONField(default=dict, blank=True)
    params = models.JSONField(default=dict, blank=True)
    expires_at = models.DateTimeField()
    opened_at = models.DateTimeField(null=True, blank=True, help_text="first visit of the page")
    completed_at = models.DateTimeField(null=True, blank=True, help_text="the page answered")
    closed_at = models.DateTimeField(
        null=True, blank=True, help_text="the question closed otherwise (declined, expired)"
    )
    result = models.JSONField(null=True, blank=True, help_text="the page's answer")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = APP_LABEL
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"link of {self.elicit_id}"

    @property
    def used(self) -> bool:
        return self.completed_at is not None or self.closed_at is not None


class McpToken(models.Model):
    """A user's bearer token for ``/mcp``: calls made with it are the user's.

    Only a hash is kept (the token is random, 32 bytes: sha256 is enough); the token itself is
    shown once, when the admin creates it. A revoked token is refused from the next request.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="mcp_tokens", on_delete=models.CASCADE
    )
    name = models.CharField(max_length=100, help_text="what it is for, e.g. “laptop agent”")
    token_hash = models.CharField(max_length=64, unique=True, help_text="sha256 of the token")
    prefix = models.CharField(
        max_length=16, blank=True, default="", help_text="the token's first characters"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True, db_index=True)
    revoked_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        app_label = APP_LABEL
        ordering = ["user", "-created_at"]
        verbose_name = "MCP token"

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"

    @property
    def identity(self) -> str:
        """The caller its calls belong to (binds requestState, tasks, legacy sessions)."""
        return f"user:{self.user_id}"
