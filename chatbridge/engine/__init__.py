"""The chat engine: a conversation's turns, its tool calls (the chat as a host of the drive
loop), recovery across workers, and the chat's protocol. No web imports."""
