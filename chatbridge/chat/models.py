"""Conversations and their messages, owned by a browser session or a user."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models


class Conversation(models.Model):
    """A chat: its owner, title and the engine phase it is in."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.CharField(max_length=80, db_index=True, help_text="user:<id> or session:<key>")
    title = models.CharField(max_length=120, default="New chat")
    phase = models.CharField(max_length=40, default="idle")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return f"{self.title} ({self.id})"


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
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "seq"], name="message_seq_unique")
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.seq}"

    def as_llm_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": self.role, "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        if self.role != "assistant" and message["content"] is None:
            message["content"] = ""
        return message
