"""The loop end to end on the CPU: the tiling study's three shapes, proof reuse, user templates
drawn from the population, and workloads no template covers."""
from __future__ import annotations

from pathlib import Path

import pytest

from formloop.errors import InvalidInput
from formloop.api.admission import admit
from formloop.api.loop import run_loop
from formloop.api.resolve import Candidate
from formloop.workload import TILING_STUDY, parse_workload, workloads_from
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.population import Population
from formloop.solve import enumerate_designs
from formloop.library.user import file_origin, load_user_template
from formloop.verify import prove_template

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "templates" / "rownorm.py"
GOOD, LOOSE = f"{EXAMPLE}:rownorm", f"{EXAMPLE}:rownorm_loose"


class CountingProver:
    """The real verifier, counting the calls per template name."""

    def __init__(self):
        self.names: list[str] = []

    def __call__(self, template, *, timeout_s):
        self.names.append(template.name)
        return prove_template(template, timeout_s=timeout_s)

    def calls(self, name: str = "gemm-tiling") -> int:
        return self.names.count(name)


def tiling_rows(report):
    """The rows of the study's template (other library templates may cover GEMM too)."""
    return [r for r in report.rows if r.template == "gemm-tiling"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    store = tmp_path_factory.mktemp("study") / "p.db"
    first, second = CountingProver(), CountingProver()
    r1 = run_loop(TILING_STUDY, store=str(store), prover=first)
    r2 = run_loop(TILING_STUDY, store=str(store), prover=second)
    return store, r1, r2, first, second


def test_study_designs_are_the_enumerated_optima(study):
    _, r1, _, _, _ = study
    assert [r.workload for r in tiling_rows(r1)] == ["gemm 4096x4096x4096 fp32", "gemm 64x4096x4096 fp32",
                                             "gemm 1000x1000x1000 fp32"]
    t, chip = get_template("gemm-tiling"), get_chip("illustrative")
    for row, w in zip(tiling_rows(r1), TILING_STUDY):
        brute = enumerate_designs(t.formulate(w.params, chip))  # independent back end
        assert row.template == "gemm-tiling" and row.proof == "proved" and row.check == "ok"
        assert row.design == dict(brute.assignment)
        assert row.predicted_us == pytest.approx(brute.objective)
        assert row.tier and row.measured_us is not None and row.design_id is not None
    # the seed's optima (Appendix A): 1826.9, 75.1 and 53.1 us
    assert [round(r.predicted_us, 1) for r in tiling_rows(r1)] == [1826.9, 75.1, 53.1]
    assert tiling_rows(r1)[2].design == {"Tm": 128, "Tn": 128, "Tk": 32, "S": 3, "P": 1, "beta": 0}


def test_study_speed_of_light_fraction(study):
    _, r1, _, _, _ = study
    big = tiling_rows(r1)[0]
    # hand count: 2*4096^3 FLOPs at 80 TFLOP/s = 1718.0 us; bytes 3*4096^2*4 / 1.8 TB/s = 112 us
    assert big.sol_floor_us == pytest.approx(2 * 4096 ** 3 / 80e12 * 1e6)
    assert big.sol_fraction == pytest.approx(big.sol_floor_us / big.measured_us)
    assert 0 < big.sol_fraction <= 1


def test_rerun_reuses_stored_proofs(study):
    store, r1, r2, first, second = study
    assert (first.calls(), second.calls()) == (1, 0)  # the second run never calls the verifier for it
    assert r1.proofs_new >= 1 and r2.proofs_reused >= 1 and r2.proofs_new == 0
    assert {r.proof_source for r in tiling_rows(r1)} == {"new"}
    assert {r.proof_source for r in tiling_rows(r2)} == {"reused"}
    assert [r.design for r in tiling_rows(r1)] == [r.design for r in tiling_rows(r2)]
    with Population(store) as pop:
        assert len(pop.designs(template="gemm-tiling")) == 3  # the same designs, stored once
        ms = pop.measurements(template="gemm-tiling")
        assert len(ms) == 6 and all(m["chip"] == "illustrative" and m["workload"].startswith("gemm fp32 ") for m in ms)
        assert len(pop.certificates(tiling_rows(r1)[0].template_hash)) == 1


def test_user_template_refused_then_admitted_then_drawn(tmp_path):
    store = str(tmp_path / "p.db")
    with Population(store) as pop:
        loose = Candidate(load_user_template(LOOSE), file_origin(LOOSE))
        status, note, _ = admit(pop, loose, prove_template, 30.0)
        assert status == "refuted" and "K1" in note
        cx = pop.counterexamples(loose.template.content_hash)
        # the witness breaks the precondition: a block narrower than the row, yet 2*BLOCK >= D
        w = cx[0]["witness"]
        assert cx[0]["obligation"] == "K1" and w["BLOCK"] < w["D"] <= 2 * w["BLOCK"]
        good = Candidate(load_user_template(GOOD), file_origin(GOOD))
        assert admit(pop, good, prove_template, 30.0)[0] == "proved"
    # a later run, with no --template, draws the admitted template for a workload in its scope
    rep = run_loop([parse_workload("rmsnorm", "R=4096,D=4096")], store=store)
    (row,) = rep.rows
    assert (row.template, row.proof, row.proof_source, row.check) == ("rownorm", "proved", "reused", "ok")
    assert row.design["BLOCK"] >= 4096
    # hand count: (2*R*D + D) * 4 bytes at 1.8 TB/s bounds the modeled time from below
    assert row.predicted_us >= (2 * 4096 * 4096 + 4096) * 4 / 1.8e12 * 1e6 * (1 - 1e-9)
    assert row.sol_floor_us is not None and row.sol_floor_us <= row.predicted_us


def test_refuted_user_template_is_never_solved(tmp_path):
    store = str(tmp_path / "p.db")
    loose = Candidate(load_user_template(LOOSE), file_origin(LOOSE))
    rep = run_loop([parse_workload("rmsnorm", "R=64,D=1024")], store=store, templates=[loose])
    (row,) = rep.rows
    assert row.proof == "refuted" and row.design == {} and row.design_id is None
    assert "counterexample" in row.note and "BLOCK" in row.note
    again = run_loop([parse_workload("rmsnorm", "R=64,D=1024")], store=store, templates=[loose])
    assert again.rows[0].proof == "refuted" and again.rows[0].proof_source == "reused"


def test_workload_outside_every_scope_is_reported(tmp_path):
    store = str(tmp_path / "p.db")
    good = Candidate(load_user_template(GOOD), file_origin(GOOD))
    rep = run_loop([parse_workload("rmsnorm", "R=8,D=9000")], store=store, templates=[good])
    assert rep.rows[0].proof == "none" and "no template covers" in rep.rows[0].note
    assert any("D <= 8192" in p["why"] for p in rep.passed_over)


def test_workload_parsing():
    assert workloads_from("tiling-study") == list(TILING_STUDY)
    assert parse_workload("gemm", "64,32,16").params == {"M": 64, "N": 32, "K": 16, "e": 4}
    assert parse_workload("gemm", "K=16,M=64,N=32", "bf16").key == "gemm bf16 M=64 N=32 K=16"
    with pytest.raises(InvalidInput, match="3 positive integers"):
        parse_workload("gemm", "64,32")
    with pytest.raises(InvalidInput, match="one value for each of M, N, K"):
        parse_workload("gemm", "M=1,N=2,Q=3")
    with pytest.raises(InvalidInput, match="a positive integer"):
        parse_workload("gemm", "0,1,1")
    with pytest.raises(InvalidInput, match="named extents"):
        parse_workload("no-such-op", "1,2")
    with pytest.raises(InvalidInput, match="suite tiling-study fixes its own shapes"):
        workloads_from("tiling-study", ["1,1,1"])
    with pytest.raises(InvalidInput, match="dtype"):
        parse_workload("gemm", "1,1,1", "int3")
