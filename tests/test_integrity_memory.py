"""Out of memory inside an integrity probe (simulated on the CPU by raising torch.OutOfMemoryError or
MemoryError): a finding of that probe (probe-failed, inconclusive, never 'minor'), never the whole
battery 'crashed'; the battery goes on with a fresh candidate, so a cache that filled the device
(the fingerprint cheat at 4096 x 393216 on the H200) does not crowd the next probe."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path

import pytest
import torch

from formloop.measure import probes
from formloop.measure.integrity import ACCEPTED, IntegrityVerdict
from formloop.measure.jobs import run_integrity
from formloop.measure.probes import check_integrity

FIX = Path(__file__).parent / "fixtures" / "integrity"
OOMS = {"cuda": lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB (simulated)"),
        "host": lambda: MemoryError(),
        "cpu-allocator": lambda: RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't "
                                              "allocate memory: you tried to allocate 6 GB")}


@pytest.mark.parametrize("kind", sorted(OOMS))
def test_out_of_memory_in_a_probe_fails_that_probe_and_the_battery_goes_on(monkeypatch, kind):
    seen = {}

    def filling_probe(s, base):
        seen["candidate"] = s.cand_fn
        for k in range(3):   # the fingerprint cache keeps one output per fresh input set
            s.call(s.inputs(s.set_seed(50 + k)))
        assert len(s.cand_fn.cache) >= 3
        raise OOMS[kind]()

    monkeypatch.setitem(probes.PROBES, "memory", filling_probe)
    report = check_integrity(FIX / "problems" / "add.py", FIX / "cheats" / "fingerprint_cache.py", seed=3,
                             probes=("memory", "cache", "call-count"))
    failed = report.flags("probe:memory")
    assert len(failed) == 1 and failed[0].details["severity"] == "probe-failed"
    assert failed[0].witness["out_of_memory"] is True and "ran out of memory" in failed[0].reason
    assert "inconclusive" in failed[0].reason and "rebuilt" in failed[0].details["released"]
    # the battery went on with a fresh candidate (its cache empty), and the next probe still caught the cheat
    assert {c.obligation for c in report.checks} >= {"probe:memory", "cached-output", "call-count"}
    assert report.flags("cached-output") and report.verdict is IntegrityVerdict.GAMING and not report.accepted


def test_out_of_memory_alone_is_never_accepted(monkeypatch):
    def oom(s, base):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setitem(probes.PROBES, "call-count", oom)
    report = check_integrity(FIX / "problems" / "add.py", FIX / "honest" / "add.py", seed=3,
                             probes=("unseen", "call-count", "mutation"))
    assert report.correct and report.verdict is IntegrityVerdict.PROBE_FAILED
    assert report.verdict not in ACCEPTED and not report.accepted
    assert [c.obligation for c in report.flags()] == ["probe:call-count"]
    assert {"unseen-inputs", "input-mutation"} <= {c.obligation for c in report.checks}


def test_a_candidate_is_rebuilt_with_the_reference_weights():
    from formloop.measure.session import Session

    s = Session(FIX / "problems" / "linear_relu.py", FIX / "honest" / "linear_relu.py", seed=4)
    old = s.cand_fn
    old.kept = torch.ones(3)
    s.rebuild_candidate()
    assert s.cand_fn is not old and not hasattr(s.cand_fn, "kept")
    assert s.weights == "copied from the reference"
    for k, v in s.ref_model.state_dict().items():
        assert torch.equal(s.cand_fn.state_dict()[k], v)


def test_sandboxed_out_of_memory_inside_a_probe_is_not_a_crash(tmp_path):
    """As a user runs it (a child process): the candidate runs out of memory on its fourth call, inside a
    probe; the run completes with that probe failed, never 'crashed'."""
    cand = tmp_path / "oom_once.py"
    cand.write_text((FIX / "honest" / "add.py").read_text() + (
        "\n\nCALLS = [0]\n_forward = ModelNew.forward\n\n\ndef _counted(self, x, y):\n    CALLS[0] += 1\n"
        "    if CALLS[0] == 4:\n        raise torch.OutOfMemoryError('CUDA out of memory (simulated)')\n"
        "    return _forward(self, x, y)\n\n\nModelNew.forward = _counted\n"))
    d = run_integrity(FIX / "problems" / "add.py", cand, seed=5)
    assert d["status"] == "completed" and d["verdict"] == "probe-failed" and d["accepted"] is False
    failed = [c for c in d["checks"] if c["obligation"].startswith("probe:")]
    assert len(failed) == 1 and failed[0]["witness"]["out_of_memory"] is True
    assert len(d["checks"]) > 10   # every other probe ran


def test_integrity_with_a_chip_holds_the_timing_against_the_floor_of_the_shapes_run():
    """The floor comes from the harness at the shapes that ran (overrides applied); a CPU timing is
    never compared with it (the ceiling check says why)."""
    from formloop.measure.harness import evaluate

    h = evaluate(FIX / "large" / "relu.py", FIX / "large" / "relu_triton.py", sets=1, seed=2, chip="h200",
                 overrides={"BATCH": 6, "DIM": 3000})
    assert h.sol_generous_s == pytest.approx(2 * 6 * 3000 * 4 / 4.8e12, rel=1e-6) and h.sol_fraction is None
    d = run_integrity(FIX / "large" / "relu.py", FIX / "large" / "relu_triton.py", seed=2, chip="h200",
                      overrides={"BATCH": 6, "DIM": 3000}, probes=("unseen",), sandbox=False)
    ceiling = [c for c in d["checks"] if c["obligation"] == "sol-ceiling"]
    assert len(ceiling) == 1 and "not applicable: timing source is 'cpu'" in ceiling[0]["reason"]
    assert d["verdict"] == "clean" and d["accepted"]
