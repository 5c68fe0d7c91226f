"""Untrusted code in a child process: every way it can end becomes a named status; hostile candidates
(exit, _exit, a signal, a hang, KeyboardInterrupt, a memory hog) get a named verdict from the harness
and the integrity battery that is never accepted and never exit 0; a problem file that dies is bad
input (exit 2)."""
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from formloop.cli import app
from formloop.errors import InvalidInput
from formloop.measure.sandbox import Limits, RunStatus, phase, run_in_child

FIX = Path(__file__).parent / "fixtures" / "integrity"
runner = CliRunner()


def _returns(x):
    phase("candidate", "adding")
    return {"twice": 2 * x}


def _staged():
    phase("harness", "correctness, input set 0")
    time.sleep(0.3)
    phase("candidate", "forward")      # a step inside the stage: not a stage of its own
    time.sleep(0.2)
    phase("harness", "timing")
    time.sleep(0.4)
    return 1


def test_stage_seconds_follow_the_childs_stages():
    """The parent times each stage from the child's phase messages (the candidate's steps stay inside their
    stage); the stages and the start before the first one add up to the child's wall time."""
    out = run_in_child(_staged)
    assert out.ok and out.value == 1
    st = out.stage_seconds
    assert set(st) == {"start", "harness: correctness, input set 0", "harness: timing"}
    assert 0.45 <= st["harness: correctness, input set 0"] < 1.5 and 0.35 <= st["harness: timing"] < 1.5
    assert sum(st.values()) == pytest.approx(out.seconds, abs=0.01)
    steps = out.step_seconds   # the stage's own part and its candidate step, split
    assert set(steps) == {"start", "harness: correctness, input set 0",
                          "harness: correctness, input set 0 > candidate: forward", "harness: timing"}
    assert 0.25 <= steps["harness: correctness, input set 0"] < 1.0
    assert 0.15 <= steps["harness: correctness, input set 0 > candidate: forward"] < 1.0
    assert sum(steps.values()) == pytest.approx(out.seconds, abs=0.01)


def _bad_input():
    raise InvalidInput("shape M", -1, "a positive integer")


def _exits(code):
    sys.exit(code)


def _hard_exit():
    phase("candidate", "forward")
    os._exit(0)


def _segfault():
    phase("problem", "get_inputs()")
    os.kill(os.getpid(), signal.SIGSEGV)


def _hangs():
    time.sleep(3600)


def _interrupt():
    raise KeyboardInterrupt


def _hog():
    return len(bytearray(64 << 30))


def _spawns_and_hangs():
    import subprocess
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    time.sleep(3600)


def test_every_ending_is_named():
    ok = run_in_child(_returns, 21)
    assert ok.status is RunStatus.COMPLETED and ok.value == {"twice": 42} and ok.step == "candidate: adding"
    bad = run_in_child(_bad_input)
    assert bad.status is RunStatus.FAILED and "shape M" in bad.message
    with pytest.raises(InvalidInput, match="shape M") as err:
        bad.reraise()
    assert err.value.field == "shape M"
    for code in (0, 3):
        out = run_in_child(_exits, code)
        assert out.status is RunStatus.EXITED and out.exitcode == code and not out.ok
    hard = run_in_child(_hard_exit)
    assert hard.status is RunStatus.EXITED and hard.exitcode == 0 and hard.culprit == "candidate"
    seg = run_in_child(_segfault)
    assert seg.status is RunStatus.CRASHED and "SIGSEGV" in seg.message and seg.culprit == "problem"
    kb = run_in_child(_interrupt)
    assert kb.status is RunStatus.CRASHED and "KeyboardInterrupt" in kb.message
    t0 = time.monotonic()
    hang = run_in_child(_hangs, limits=Limits(wall_s=2.0))
    assert hang.status is RunStatus.TIMED_OUT and time.monotonic() - t0 < 20
    hog = run_in_child(_hog, limits=Limits(memory_bytes=1 << 30))
    assert hog.status is RunStatus.CRASHED and "MemoryError" in hog.message


def test_a_timed_out_child_takes_what_it_spawned_with_it():
    out = run_in_child(_spawns_and_hangs, limits=Limits(wall_s=3.0))
    assert out.status is RunStatus.TIMED_OUT
    time.sleep(0.5)
    left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).endswith("time.sleep(3600)")]
    assert left == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def test_limits_are_validated():
    for bad in (float("nan"), 0, -1, 1e9):
        with pytest.raises(InvalidInput, match="timeout"):
            Limits(wall_s=bad)
    with pytest.raises(InvalidInput, match="memory"):
        Limits(memory_bytes=10)


HOSTILE = {
    "sys_exit": ("import sys\n", "sys.exit(0)", "exited"),
    "os_exit": ("import os\n", "os._exit(0)", "exited"),
    "segfault": ("import os, signal\n", "os.kill(os.getpid(), signal.SIGSEGV)", "crashed"),
    "hang": ("import time\n", "time.sleep(3600)", "timed-out"),
    "interrupt": ("", "raise KeyboardInterrupt", "crashed"),
    "memory_hog": ("", "return len(bytearray(64 << 30))", "crashed"),
}


def _candidate(tmp_path: Path, name: str) -> Path:
    imports, body, _ = HOSTILE[name]
    path = tmp_path / f"{name}.py"
    path.write_text(f"{imports}import torch\nfrom torch import nn\n\n\nclass ModelNew(nn.Module):\n"
                    f"    def forward(self, x, y):\n        {body}\n")
    return path


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_candidate_gets_a_named_verdict_from_the_harness(tmp_path, name):
    r = runner.invoke(app, ["harness", str(FIX / "problems" / "add.py"), str(_candidate(tmp_path, name)), "--json",
                            "--timeout", "6" if name == "hang" else "60", "--memory-gb", "2"])
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert d["status"] == d["verdict"] == HOSTILE[name][2] and d["correct"] is False and d["accepted"] is False
    assert d["culprit"] == "candidate" and "Traceback" not in r.stdout


@pytest.mark.parametrize("name", ["os_exit", "hang", "interrupt"])
def test_hostile_candidate_gets_a_named_verdict_from_integrity(tmp_path, name):
    r = runner.invoke(app, ["integrity", str(FIX / "problems" / "add.py"), str(_candidate(tmp_path, name)),
                            "--timeout", "6" if name == "hang" else "60"])
    assert r.exit_code == 1, r.output
    text = " ".join(r.stdout.split())
    assert text.startswith(HOSTILE[name][2].upper() + ":") and "not accepted" in text and "candidate: forward" in text


def test_a_problem_that_dies_is_bad_input(tmp_path):
    problem = tmp_path / "dies.py"
    problem.write_text("import os\nimport torch\nfrom torch import nn\n\nclass Model(nn.Module):\n"
                       "    def forward(self, x):\n        return x\n\ndef get_inputs():\n    os._exit(0)\n\n"
                       "def get_init_inputs():\n    return []\n")
    r = runner.invoke(app, ["harness", str(problem), str(FIX / "honest" / "silu.py"), "--json"])
    assert r.exit_code == 2, r.output
    d = json.loads(r.stdout)
    assert d["verdict"] == "exited" and d["culprit"] == "problem" and "get_inputs" in d["step"]


def test_the_sandboxed_harness_reports_where_its_time_went():
    """run_harness's result carries its child's stage seconds, correctness per input set and timing among
    them (what the torch.compile baselines keep, as the optimizer's verify children do)."""
    from formloop.measure.jobs import run_harness

    h = run_harness(FIX / "problems" / "add.py", FIX / "honest" / "add.py", seed=5, sets=2)
    assert h["correct"]
    st = h["stage_seconds"]
    assert {"harness: correctness, input set 0", "harness: correctness, input set 1", "harness: timing"} <= set(st)
    assert all(v >= 0 for v in st.values()) and st["harness: timing"] > 0
    steps = h["step_seconds"]   # the untrusted code's share of a correctness set: the reference and the candidate
    assert {"harness: correctness, input set 0 > problem: reference forward",
            "harness: correctness, input set 0 > candidate: forward"} <= set(steps)


def _compiles_twice(cache_dir: str) -> int:
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    os.environ.pop("TRITON_INTERPRET", None)   # compiled, not interpreted (another test may have set it)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from formloop.library.vecops_kernel import _colarg_kernel
    from formloop.measure import sandbox

    sandbox.child_setup.count_compiles(sandbox._send)   # the GPU preload imports Triton first; here the test does
    phase("candidate", "forward")
    sig = {"x_ptr": "*fp32", "y_ptr": "*i64", "D1": "i32", "D2": "i32", "MIN": "constexpr", "BC": "constexpr",
           "RP": "constexpr"}
    for _ in range(2):   # the second is a cache hit: not a compile
        triton.compile(ASTSource(_colarg_kernel, sig, {"MIN": False, "BC": 16, "RP": 32}),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": 1, "num_stages": 2})
    return 1


def test_a_childs_triton_compiles_are_counted_in_the_step_they_ran_in(tmp_path):
    """A Triton cache miss in a child adds its seconds under the step it ran in and counts one kernel; the
    same kernel again (a cache hit) adds nothing (the compile is for sm_90, no GPU needed)."""
    out = run_in_child(_compiles_twice, str(tmp_path / "triton"), limits=Limits(wall_s=120))
    assert out.ok, out.message
    assert out.step_seconds["count: Triton kernels compiled"] == 1
    compiled = out.step_seconds["start > candidate: forward > of which Triton compiles"]
    assert 0 < compiled <= out.step_seconds["start > candidate: forward"]


def _compiles_with_inductor(cache_dir: str) -> int:
    os.environ.update({"TORCHINDUCTOR_CACHE_DIR": cache_dir, "TORCHINDUCTOR_COMPILE_THREADS": "1"})
    import torch
    torch.compile(lambda x: torch.relu(x) * 2)(torch.ones(8))
    return 1


def test_a_childs_inductor_cache_hits_and_misses_are_counted(tmp_path):
    """The FX graph cache misses in the first child that compiles a function and hits in the second (same cache
    directory): the counts the parent gets say so."""
    first, second = (run_in_child(_compiles_with_inductor, str(tmp_path), limits=Limits(wall_s=300))
                     for _ in range(2))
    assert first.ok and second.ok, (first.message, second.message)
    assert first.step_seconds.get("count: fxgraph_cache_miss") == 1 and "count: fxgraph_cache_hit" not in \
        first.step_seconds
    assert second.step_seconds.get("count: fxgraph_cache_hit") == 1 and "count: fxgraph_cache_miss" not in \
        second.step_seconds


def test_the_compiler_is_preloaded_only_where_a_fork_keeps_cuda_usable(monkeypatch):
    """torch.compile's modules join the forkserver's imports only with a GPU, Triton compiling (not interpreting)
    and torch's NVML device check on (set when unset): without it their device check initializes the CUDA driver in
    the forkserver and no forked child can use CUDA (measured on the H200)."""
    import torch

    from formloop.measure import sandbox
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv(sandbox.NVML_CHECK, raising=False)
    assert sandbox.preload() == sandbox.PRELOAD + sandbox.GPU_PRELOAD and os.environ[sandbox.NVML_CHECK] == "1"
    monkeypatch.setenv(sandbox.NVML_CHECK, "0")       # the user's own choice is kept: then no compiler preload
    assert sandbox.preload() == sandbox.PRELOAD
    monkeypatch.setenv(sandbox.NVML_CHECK, "1")
    monkeypatch.setenv("TRITON_INTERPRET", "1")       # a CPU child imports triton after setting this itself
    assert sandbox.preload() == sandbox.PRELOAD
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert sandbox.preload() == sandbox.PRELOAD


def test_a_child_starts_no_progress_bar_monitor(monkeypatch):
    """tqdm's monitor thread outlives its bars by up to 10 s, and the harness would wait for it: a child turns
    it off (a stand-in tqdm here: the GPU image has the real one)."""
    import types

    from formloop.measure import sandbox

    fake = types.ModuleType("tqdm")
    fake.tqdm = type("tqdm", (), {"monitor_interval": 10})
    monkeypatch.setitem(sys.modules, "tqdm", fake)
    sandbox.child_setup.no_progress_monitor()
    assert fake.tqdm.monitor_interval == 0


def test_a_child_applies_its_inductor_compile_threads_to_the_preloaded_config(monkeypatch):
    """Inductor decided its compile threads when the forkserver imported it: the child's environment value wins
    (a stand-in config module here); no value, or a bad one, leaves the config alone."""
    import types

    from formloop.measure import child_setup

    config = types.SimpleNamespace(compile_threads=16)
    monkeypatch.setitem(sys.modules, "torch._inductor.config", config)
    child_setup.inductor_threads({"TORCHINDUCTOR_COMPILE_THREADS": "x"})
    child_setup.inductor_threads({})
    assert config.compile_threads == 16
    child_setup.inductor_threads({"TORCHINDUCTOR_COMPILE_THREADS": "1"})
    assert config.compile_threads == 1
