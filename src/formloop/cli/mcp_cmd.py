"""`formloop mcp`: serve the loop's tools to an agent over stdio (the MCP SDK is imported only here)."""
from __future__ import annotations

from typing import Optional

import typer

from formloop.cli import app
from formloop.cli.common import friendly


@app.command()
@friendly
def mcp(store: Optional[str] = typer.Option(None, help="population file (default: $FORMLOOP_STORE or .formloop/population.db)")
        ) -> None:
    """Run the MCP server on stdin/stdout (tools: list_templates, show_template, prove, solve, check,
    sol_report, evaluate, wall_relax, population_query, add_template)."""
    from formloop.agent.server import serve
    from formloop.settings import load_settings

    serve(load_settings().with_overrides(store_path=store))
