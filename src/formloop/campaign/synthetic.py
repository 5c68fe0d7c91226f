"""A synthetic attempt log with the shape of a real optimisation campaign, for tests and demos.

Each problem has a reference runtime some factor above its SOL floor and an achievable runtime
between the floor and (for hard problems) above the reference. Attempts approach the achievable
runtime with diminishing returns and multiplicative noise; some fail to compile or are incorrect;
a few are gaming (some of those land under the SOL floor, others do not, so the ceiling detector
alone misses some) or PyTorch-only (fusion in PyTorch that beats the reference modestly). Token
costs vary per attempt. Everything is drawn from one seeded generator, so a log is reproducible."""
from __future__ import annotations

import numpy as np

from formloop.errors import InvalidInput


def synthetic_log(n_problems: int = 40, attempts: int = 24, seed: int = 0, *, p_fail: float = 0.25,
                  p_gaming: float = 0.04, p_torch_only: float = 0.05) -> list[dict]:
    if n_problems < 1 or attempts < 1:
        raise InvalidInput("synthetic log size", (n_problems, attempts), "n_problems >= 1 and attempts >= 1")
    rng = np.random.default_rng(seed)
    records: list[dict] = []
    for k in range(n_problems):
        name = f"p{k:03d}"
        t_sol = float(10 ** rng.uniform(-5, -3))
        t_ref = t_sol * float(rng.uniform(1.3, 30.0))
        # achievable runtime: usually between the floor and the reference, sometimes worse than the reference
        stall = float(rng.uniform(1.0, 3.0)) if rng.random() < 0.2 else 1.0
        reach = t_sol * (1.0 + float(rng.exponential(0.6))) * stall
        start = t_ref * float(rng.uniform(0.9, 3.0))
        tau = float(rng.uniform(1.0, 6.0))
        records.append({"type": "problem", "problem": name, "ref_runtime_s": t_ref, "sol_runtime_s": t_sol})
        for i in range(1, attempts + 1):
            tokens = int(rng.integers(3000, 15000))
            u = rng.random()
            rec = {"problem": name, "attempt": i, "tokens": tokens}
            if u < p_fail:
                rec.update(status=str(rng.choice(["incorrect", "error"])), runtime_s=None, verdict="clean")
            elif u < p_fail + p_gaming:
                rec.update(status="correct", verdict="gaming", runtime_s=t_sol * float(rng.uniform(0.3, 1.5)))
            elif u < p_fail + p_gaming + p_torch_only:
                rec.update(status="correct", verdict="torch-only", runtime_s=t_ref * float(rng.uniform(0.45, 0.95)))
            else:
                mean = reach + (start - reach) * float(np.exp(-i / tau))
                rec.update(status="correct", verdict="minor" if rng.random() < 0.1 else "clean",
                           runtime_s=max(mean * float(rng.lognormal(0.0, 0.12)), 0.92 * t_sol))
            records.append(rec)
    return records
