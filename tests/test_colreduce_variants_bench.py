"""benchmarks/colreduce_variants.py on the CPU (interpreter, tiny shape): every argmax variant the benchmark times
on the GPU (the library loop, the prefetching loop, the split loop with its combine) returns exactly torch.argmax's
indices, in fp32 and bf16, before anything is timed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[1]


def test_dry_run_every_variant_returns_torchs_indices(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "colreduce_variants.py"), "--out", str(tmp_path),
                        "--dry-run"], capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
    rows = json.loads((tmp_path / "colreduce_variants.json").read_text())["rows"]
    kinds = {(x["dtype"], x["variant"]) for x in rows if x["design"] is not None and x["ok"]}
    assert {(d, v) for d in ("fp32", "bf16") for v in ("lib", "pf", "split")} <= kinds
    assert all(x["ok"] for x in rows)
