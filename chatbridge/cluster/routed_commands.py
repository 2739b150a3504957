"""What a user's command routed from another worker does here (``WorkerListener`` receives
it): the conversation's turn runs on this worker, or the call is held here."""

from __future__ import annotations

from typing import assert_never

from chatbridge.cluster.messages import CommandDone
from chatbridge.engine.engine import ChatHub, CommandRefused
from chatbridge.engine.protocol import (
    Abort,
    Approve,
    Command,
    Deny,
    EditMessage,
    ElicitResponseCommand,
    Regenerate,
    Stop,
    UserMessageCommand,
)
from chatbridge.records.recorder import WORKER_ID

__all__ = ["routed_outcome"]


async def routed_outcome(hub: ChatHub, conversation_id: str, command: Command) -> CommandDone:
    """Carry out a user's abort, approve, deny or stop that another worker routed here (this
    worker runs the conversation's turn or holds the call); how it went, for the sender."""
    try:
        match command:
            case Abort():
                await hub.abort(conversation_id, command.session_id, command.reason, routed=True)
            case Approve():
                await hub.decide(conversation_id, command.call_id, True, routed=True)
            case Deny():
                await hub.decide(
                    conversation_id, command.call_id, False, command.reason, routed=True
                )
            case Stop():
                await hub.stop(conversation_id, routed=True)
            case UserMessageCommand() | ElicitResponseCommand() | EditMessage() | Regenerate():
                return CommandDone(
                    worker=WORKER_ID,
                    ok=False,
                    code="BAD_COMMAND",
                    message=f"A {command.type!r} command is not routed between workers.",
                )
            case _:
                assert_never(command)
    except CommandRefused as exc:
        return CommandDone(worker=WORKER_ID, ok=False, code=exc.code, message=str(exc))
    return CommandDone(worker=WORKER_ID, ok=True)
