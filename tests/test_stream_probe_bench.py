"""benchmarks/stream_probe.py's CPU path: every streaming walk it times on the GPU (flat blocks with cache hints,
persistent grid-stride and chunked programs) writes exactly relu(x) over a NaN-poisoned output in the interpreter,
with a tail no block size divides; the campaign-path check (harness.evaluate on problems/level1/relu.py) passes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_dry_run_every_walk_is_exact(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stream_probe.py"), "--dry-run", "--placement",
                        "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = json.loads((tmp_path / "stream_probe.json").read_text())
    assert out["tier"].startswith("interpreter") and out["shape"] == [8, 1000]   # 8000: no block size divides it
    for dtype in ("fp32", "bf16"):
        rows = out["dtypes"][dtype]
        designs = [x for x in rows if x["design"].startswith(("flat", "persistent"))]
        assert len(designs) >= 50 and all(x["correct"] for x in designs)
        assert {d["design"].split()[1] for d in designs if d["design"].startswith("persistent")} == {"stride", "chunk"}
        harness = [x for x in out["timer_check"][dtype] if x["design"] == "harness.evaluate"]
        assert harness and harness[0]["correct"] is True
        assert out["placement"][dtype] and all(x["correct"] for x in out["placement"][dtype])
