"""One expression layer: nodes, and their lowerings (numpy, HiGHS tables, Z3)."""
from formloop.expr.evaluate import evaluate, grid_env, substitute
from formloop.expr.nodes import (
    Decision, Expr, Op, Param, all_of, any_of, ceildiv, const, decision, decisions_of, floordiv, implies, maximum,
    minimum, mod, param, params_of, postorder, render, total, where,
)

__all__ = [
    "Decision", "Expr", "Op", "Param", "all_of", "any_of", "ceildiv", "const", "decision", "decisions_of",
    "evaluate", "floordiv", "grid_env", "implies", "maximum", "minimum", "mod", "param", "params_of", "postorder",
    "render", "substitute", "total", "where",
]
