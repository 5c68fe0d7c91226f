"""The agent interface: an MCP server (`server.py`) whose tools map one-to-one onto `formloop.api` calls.
Only `server.build_server` imports the `mcp` SDK, so the core never depends on it."""
