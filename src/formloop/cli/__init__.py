"""`formloop …`: thin commands over `formloop.api` (parse arguments, render answers). Each area adds its
commands in its own module."""
from __future__ import annotations

import importlib

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="formloop: prove, solve, check, measure and learn kernel templates.")

# One module per command area; each registers its commands on `app` when imported.
COMMAND_MODULES = (
    "formloop.cli.solve_cmd",
    "formloop.cli.sol_cmd",
    "formloop.cli.run_cmd", "formloop.cli.population_cmd", "formloop.cli.mcp_cmd",
    "formloop.cli.verify_cmd",
    "formloop.cli.codesign_cmd",
    "formloop.cli.chain_cmd",
    "formloop.cli.campaign_cmd",
    "formloop.cli.measure_cmd",
    "formloop.cli.problems_cmd",
    "formloop.cli.dsl_cmd",
    "formloop.cli.optimize_cmd",
    "formloop.cli.layer_cmd",
    "formloop.cli.reuse_cmd",
)

for _module in COMMAND_MODULES:
    importlib.import_module(_module)


def main() -> None:
    app()
