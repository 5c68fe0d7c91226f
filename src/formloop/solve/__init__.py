"""Solvers: HiGHS MILP and exhaustive enumeration, with typed results."""
from formloop.solve.enumerate import enumerate_designs, ranked_designs
from formloop.solve.highs import solve_milp
from formloop.solve.result import ModelSize, Solution, SolveStatus, tied

SOLVERS = {"milp": solve_milp, "enumerate": enumerate_designs}

__all__ = ["ModelSize", "SOLVERS", "Solution", "SolveStatus", "enumerate_designs", "ranked_designs", "solve_milp",
           "tied"]
