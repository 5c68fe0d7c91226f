"""Shared by the population tests: a stand-in certificate, a seeded store, the ways a store file gets
damaged, and a runner for code that must run as a user without write access."""
from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from formloop.library import get_template
from formloop.population import MeasurementFact, Population
from formloop.template import Template
from formloop.verify.outcome import ObligationResult, Verdict

ROOT = Path(__file__).resolve().parents[1]
GEMM = get_template("gemm-tiling")
WL, CHIP = "gemm fp32 M=64 N=64 K=64", "illustrative"
NOBODY = 65534
GARBAGE = 64 * 1024


@dataclass
class FakeCertificate:
    """Stands in for the verifier's certificate: the store reads only these fields."""

    template_hash: str
    obligations: list = field(default_factory=list)
    verdict: Verdict = Verdict.PROVED

    def to_json(self) -> str:
        return json.dumps({"template_hash": self.template_hash, "verdict": self.verdict.value})


def cert(t: Template, verdicts=("proved", "proved", "proved")) -> FakeCertificate:
    obs = [ObligationResult(k, Verdict(v), 0.01, witness={"x": 1} if v == "counterexample" else None,
                            trace=("load x", "read x") if v == "counterexample" else ())
           for k, v in zip(("K1", "coverage[rows]", "K3"), verdicts)]
    overall = Verdict.PROVED if all(v == "proved" for v in verdicts) else (
        Verdict.COUNTEREXAMPLE if "counterexample" in verdicts else Verdict.UNRESOLVED)
    return FakeCertificate(t.content_hash, obs, overall)


def seed_store(path: Path, designs: int = 400) -> dict[str, int]:
    """A store with GEMM proved and `designs` designs of two measurements each (padded provenance, so
    the file spans many pages); returns the row counts written."""
    with Population(path) as p:
        p.add_template(GEMM, origin="library:gemm-tiling", certificate=cert(GEMM), toolchain="tc")
        for i in range(designs):
            p.add_design_with_measurements(
                GEMM.content_hash, workload=f"gemm fp32 M={i + 1} N=1 K=1", chip=CHIP, assignment={"Tm": 16, "i": i},
                predicted=float(i), unit="us", solver="milp",
                measurements=[MeasurementFact("model", "cpu", i * 1e-6, provenance={"pad": "p" * 300}),
                              MeasurementFact("gpu", "h200", None, failure="CompileError: x")])
    return {"templates": 1, "certificates": 1, "counterexamples": 0, "designs": designs,
            "measurements": 2 * designs, "calibrations": 0}


# -- damage, each deterministic -------------------------------------------------------------------
def truncate_half(p: Path) -> None:
    os.truncate(p, p.stat().st_size // 2)


def garbage_middle(p: Path) -> None:
    """64 KiB of seeded random bytes over the middle of the file, its size unchanged."""
    size = p.stat().st_size
    assert size > 2 * GARBAGE, "the store must span well beyond the garbage"
    with open(p, "r+b") as f:
        f.seek(size // 2 - GARBAGE // 2)
        f.write(random.Random(12).randbytes(GARBAGE))


def garbage_header(p: Path) -> None:
    with open(p, "r+b") as f:
        f.write(random.Random(7).randbytes(100))


def zero_length(p: Path) -> None:
    os.truncate(p, 0)


DAMAGE = {"truncated": truncate_half, "garbage-middle": garbage_middle, "garbage-header": garbage_header,
          "zero-length": zero_length}


def snapshot(p: Path) -> tuple[str, tuple[str, ...]]:
    """The file's bytes (digest) and its directory's listing: what 'never written' compares."""
    return hashlib.sha256(p.read_bytes()).hexdigest(), tuple(sorted(os.listdir(p.parent)))


# -- running as a user who may not write -----------------------------------------------------------
def shared_dir() -> Path:
    """A fresh directory another user can reach (root's pytest tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="formloop-store-"))
    d.chmod(0o755)
    return d


def run_unprivileged(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in a forked child, as user nobody when this process is root (root writes through
    any file mode, so a read-only test needs another user); returns its JSON-able result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no exec, so no interpreter path needs to be reachable by nobody
        os.close(r)
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            out = {"result": fn(*args)}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the test
            out = {"error": f"{type(exc).__name__}: {exc}"}
        with os.fdopen(w, "w") as f:
            f.write(json.dumps(out))
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    os.waitpid(pid, 0)
    out = json.loads(data)
    assert "error" not in out, out["error"]
    return out["result"]


def run_python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter with this checkout's sources first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)
