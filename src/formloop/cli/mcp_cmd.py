"""`formloop mcp`: serve the api's actions to an agent over stdio (the MCP SDK is imported only here)."""
from __future__ import annotations

from typing import Optional

import typer

from formloop.agent.server import serve
from formloop.cli import app
from formloop.cli.common import friendly
from formloop.settings import load_settings


@app.command()
@friendly
def mcp(store: Optional[str] = typer.Option(None, help="population file (default: $FORMLOOP_STORE or "
                                                      ".formloop/population.db)")) -> None:
    """Run the MCP server on stdin/stdout; its tools (formloop.agent.server.TOOL_NAMES) answer as the
    CLI commands' --json do."""
    serve(load_settings().with_overrides(store_path=store))
