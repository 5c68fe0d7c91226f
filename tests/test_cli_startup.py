"""The CLI and the API load without torch: `formloop --help`, the solvers, the store and the proofs start in under a
second; torch is imported where a step needs it (capture, assembly, measurement)."""
import subprocess
import sys


def test_the_cli_and_api_import_without_torch():
    code = "import sys, formloop.cli, formloop.api; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout[:500]
