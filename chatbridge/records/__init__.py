"""Persistence shared by the chat and MCP: the recorder (journal and session rows), the ordered
writer, a call's lease, the conversation store, URL questions' links and MCP tokens."""
