"""The app's tables, for Django's app registry: they are defined in ``chatbridge.records.models``
(the persistence layer, which the records and the cluster may import)."""

from chatbridge.records.models import (
    Conversation,
    ElicitLink,
    JournalRecord,
    McpToken,
    Message,
    QueueEntry,
    ToolSession,
    WorkerHeartbeat,
)

__all__ = [
    "Conversation",
    "ElicitLink",
    "JournalRecord",
    "McpToken",
    "Message",
    "QueueEntry",
    "ToolSession",
    "WorkerHeartbeat",
]
