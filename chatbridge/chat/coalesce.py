"""What a socket that is behind is sent: its queued events, with the superseded ones left out.

A socket's events wait in its outbox while the client reads slower than they come (a slow
network, a busy browser, a loaded worker). When the socket's sender takes the next event it
takes every event queued behind it too, and sends them coalesced:

- of the ``conversation_state`` events among them only the last is sent, where it was
  queued: each is the whole state, so the ones before it would be overwritten unseen;
- ``assistant_delta`` events of one message queued one right after the other are sent as
  one delta, their texts joined in order.

Every other event is sent as it came, in order, once. A client that keeps up sees every event
(nothing is queued behind the one being sent); one that is behind sees fewer frames and ends
in the same state. ``elicit``, ``progress`` and the rest are never merged or dropped: what a
person reads or answers is never left out.
"""

from __future__ import annotations

from chatbridge.engine.protocol import AssistantDelta, ChatEvent, ConversationState

__all__ = ["coalesce"]


def coalesce(events: list[ChatEvent]) -> list[ChatEvent]:
    """``events`` (in the order queued) as a socket that is behind is sent them."""
    if len(events) < 2:
        return events
    last_state = max(
        (n for n, event in enumerate(events) if isinstance(event, ConversationState)),
        default=-1,
    )
    out: list[ChatEvent] = []
    for n, event in enumerate(events):
        if isinstance(event, ConversationState) and n != last_state:
            continue  # superseded by a later state in this batch
        previous = out[-1] if out else None
        if (
            isinstance(event, AssistantDelta)
            and isinstance(previous, AssistantDelta)
            and previous.message_id == event.message_id
        ):
            out[-1] = previous.model_copy(update={"delta": previous.delta + event.delta})
            continue
        out.append(event)
    return out
