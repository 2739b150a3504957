"""ChatBridge tools served over MCP (DESIGN §6)."""
