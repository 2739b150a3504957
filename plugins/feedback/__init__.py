"""The feedback plugin: an MCP-style tool whose form is drawn by ``auto_form``; needs approval."""
