// The test host's browser bundle: the official host side of MCP Apps.
export { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";
