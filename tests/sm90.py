"""Compiling Triton kernels for sm_90 (Hopper) on a CPU-only machine: Triton's compiler and the wheel's ptxas run
without a GPU when the active driver only names the target. The compile runs in a fresh interpreter, because the
kernel tests import the kernel modules in interpreter mode first."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# The first lines of every compile script: a driver that names the target and launches nothing.
TARGET_ONLY = r"""
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver


class TargetOnly:  # names the target; nothing is launched
    def get_current_device(self): return 0
    def get_current_stream(self, device=None): return 0
    def get_current_target(self): return GPUTarget("cuda", 90, 128)


driver.set_active(TargetOnly())
"""


def has_ptxas(tool: str = "ptxas") -> bool:
    """The wheel's `tool` (ptxas, cuobjdump), found without importing triton here (the kernel tests import it
    in interpreter mode first)."""
    spec = importlib.util.find_spec("triton")
    return spec is not None and any((Path(p) / "backends" / "nvidia" / "bin" / tool).exists()
                                    for p in spec.submodule_search_locations or ())


def run_compile_script(body: str, *, prelude: str = TARGET_ONLY, timeout: float = 600) -> Any:
    """Run `prelude` + `body` in a fresh interpreter (no TRITON_INTERPRET); the JSON of its last stdout line."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-c", prelude + body], capture_output=True, text=True, env=env,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
