"""One expression layer: nodes, and their lowerings (numpy, HiGHS tables, Z3)."""
from formloop.expr.evaluate import evaluate, grid_env
from formloop.expr.nodes import (
    Decision, Expr, Param, all_of, ceildiv, const, decision, decisions_of, floordiv, implies, maximum,
    minimum, param, params_of, postorder, render, substitute, where,
)

__all__ = [
    "Decision", "Expr", "Param", "all_of", "ceildiv", "const", "decision", "decisions_of", "evaluate",
    "floordiv", "grid_env", "implies", "maximum", "minimum", "param", "params_of", "postorder", "render",
    "substitute", "where",
]
