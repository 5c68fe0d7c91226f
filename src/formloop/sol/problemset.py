"""A folder of kernel problems: found, loaded and given their speed-of-light reports.

Layout (problems/README.md): problem files in `level1/`, `level2/`, `level3/` under the root (single
operators, fused chains, whole models), or directly in the root with an optional `LEVEL` constant.
Files whose names start with `_` are helpers, not problems. Problem names (file stems) are unique
across the set, so a name identifies a problem."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from formloop.errors import InvalidInput, StructureError
from formloop.sol.problem import Problem, load_problem


def find_problem_files(root: str | Path) -> list[Path]:
    """Every problem file under `root`, level folders in order, then by name."""
    base = Path(root)
    if not base.is_dir():
        raise InvalidInput("problem directory", str(root), "an existing directory of problem .py files")
    files = sorted((p for p in base.rglob("*.py") if not p.name.startswith("_") and "__pycache__" not in p.parts),
                   key=lambda p: (str(p.relative_to(base).parent), p.name))
    if not files:
        raise InvalidInput("problem directory", str(root), "a directory holding at least one problem .py file")
    seen: dict[str, Path] = {}
    for p in files:
        if p.stem in seen:
            raise StructureError(f"problem set {root}: two problems named {p.stem} ({seen[p.stem]} and {p})",
                                 fix="rename one: problem names are unique across levels")
        seen[p.stem] = p
    return files


def load_problem_set(root: str | Path, *, small: bool = False, levels: tuple[int, ...] = ()) -> list[Problem]:
    """All problems under `root` (at their SMALL sizes if `small`), optionally only some levels."""
    problems = [load_problem(p, small=small) for p in find_problem_files(root)]
    if levels:
        bad = sorted(set(levels) - {1, 2, 3})
        if bad:
            raise InvalidInput("level", bad[0], [1, 2, 3])
        problems = [p for p in problems if p.level in levels]
    return problems


def problem_id(problem: Problem, root: str | Path) -> str:
    """The problem's path under the set's root without `.py`, e.g. `level1/gemm_square`."""
    try:
        return str(problem.path.relative_to(Path(root)).with_suffix(""))
    except ValueError:
        return problem.name


@dataclass(frozen=True)
class SOLRow:
    """One problem's automatic SOL, with what it cost to compute (host seconds)."""

    id: str
    level: int | None
    report: object | None            # SOLReport, or None when counting failed
    error: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict:
        r = self.report
        d = {"id": self.id, "level": self.level, "sol_error": self.error, "sol_seconds": self.seconds}
        if r is not None:
            d.update(flops=r.flops, matmul_flops=r.matmul_flops, vector_flops=r.vector_flops, bytes=r.bytes,
                     intensity=r.intensity, bound=r.bound, floor_s=r.time_floor_s,
                     compute_precision=r.compute_precision, dtype=r.dtype, chip=r.chip, lower_bound=r.lower_bound,
                     uncounted=list(r.uncounted), notes=list(r.notes),
                     floors_s=dict(r.variants))    # compute precision -> floor (fp32 references run without TF32)
        return d


def sol_row(problem: Problem, root: str | Path, chip: str, **kwargs) -> SOLRow:
    """The automatic SOL of one problem; a problem that cannot be counted gives its error, not a crash."""
    from formloop.sol.auto import sol_for_problem     # imports torch

    start = time.perf_counter()
    try:
        report, error = sol_for_problem(problem, chip, **kwargs), ""
    except (StructureError, InvalidInput) as exc:
        report, error = None, str(exc)
    return SOLRow(problem_id(problem, root), problem.level, report, error, time.perf_counter() - start)
