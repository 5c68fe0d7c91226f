"""The rowwise family: template solve and checks (model), and its Triton kernels against the float64
reference in the interpreter (random, zero, scaled and tail inputs; looped and one-tile paths)."""
from __future__ import annotations

import pytest

from formloop.errors import InvalidInput
from formloop.hw.chips import get_chip
from formloop.library import get_template, template_names
from formloop.library.rowwise import ROW_OPS, sol_bytes, template_name, workload
from formloop.solve import enumerate_designs, solve_milp


def test_registered_and_solves_like_enumeration():
    for op in ROW_OPS:
        assert template_name(op) in template_names()
    t = get_template("rowwise-rmsnorm")
    f = t.formulate(workload(4096, 4096, "bf16"), get_chip("h200"))
    milp, brute = solve_milp(f), enumerate_designs(f)
    assert milp.objective == pytest.approx(brute.objective, rel=1e-6)
    assert not t.check(milp.assignment, workload(4096, 4096, "bf16"), get_chip("h200"))
    assert milp.assignment["BC"] >= 4096  # a 4096-wide bf16 row fits one tile


def test_walls_and_sol_bytes():
    t = get_template("rowwise-softmax", dtype="fp32")
    wl, chip = workload(8, 100, "fp32"), get_chip("h200")
    bad = t.check({"BC": 1024, "RP": 1, "W": 4, "S": 1}, wl, chip)
    assert any(v.name == "C3" for v in bad)  # wider than the row's power of two
    assert not t.check({"BC": 128, "RP": 1, "W": 4, "S": 1}, wl, chip)
    assert any(v.name == "C6" for v in t.check({"BC": 128, "RP": 1, "W": 4, "S": 2}, wl, chip))
    assert sol_bytes("rmsnorm-residual", 2, 8, 2) == 4 * 2 * 8 * 2 + 8 * 2
    assert sol_bytes("argmax", 2, 8, 4) == 2 * 8 * 4 + 2 * 8


def test_named_errors():
    with pytest.raises(InvalidInput, match="dtype"):
        get_template("rowwise-rmsnorm", dtype="int8")
    with pytest.raises(InvalidInput, match="chip"):
        get_template("rowwise-rmsnorm").formulate(workload(4, 4), get_chip("illustrative"))


def test_proof_index_obligations():
    from formloop.verify.certificate import ProofRun
    from formloop.verify.outcome import Verdict
    t = get_template("rowwise-sum", dtype="fp32")
    plan = t.obligations(t)
    results = plan.checks[0](ProofRun(scope=None, timeout_s=10))
    assert results and all(r.verdict is Verdict.PROVED for r in results)


@pytest.mark.parametrize("name,opts", [("rowwise-rmsnorm", {}), ("rowwise-argmax", {"dtype": "fp32"}),
                                       ("rowwise-rmsnorm-residual", {}), ("elementwise", {"chain": "silu >> mul"}),
                                       ("qk-norm-rope-kv", {})])
def test_families_prove(name, opts):
    """K1 (constraints imply the preconditions), K3 (a design exists for every workload) and the index
    obligations, for every extent."""
    from formloop.verify.certificate import prove_template
    from formloop.verify.outcome import Verdict
    cert = prove_template(get_template(name, **opts))
    assert cert.verdict is Verdict.PROVED, [(r.obligation, r.verdict) for r in cert.obligations
                                            if r.verdict is not Verdict.PROVED]


def test_long_rows_price_the_second_pass_from_dram_and_loop_registers():
    """A 393216-wide fp32 softmax cannot keep the rows in flight in the L2: the re-read is a DRAM pass
    (3 passes of R·C·4 bytes); the looped online softmax holds 4 tiles, so 64 values per thread do not fit."""
    t = get_template("rowwise-softmax", dtype="fp32")
    wl, chip = workload(4096, 393216, "fp32"), get_chip("h200")
    d = solve_milp(t.formulate(wl, chip)).assignment
    terms = t.evaluate_terms(d, t.bind(wl, chip))
    assert terms["T_mem_us"] * 1e-6 >= 3 * 4096 * 393216 * 4 / chip.bandwidth
    assert any(v.name == "C1" for v in t.check({"BC": 2048, "RP": 16, "W": 16, "S": 2}, wl, chip))
    short = workload(4096, 4096, "fp32")  # one tile: two live tiles suffice
    assert not any(v.name == "C1" for v in t.check({"BC": 4096, "RP": 1, "W": 8, "S": 1}, short, chip))


def test_fp32_sums_keep_their_sequential_partials_short():
    """Wall C8: every design the fp32 sum and mean templates admit at row_sum's size adds at most
    FP32_SUM_CHAIN tiles per lane (brute force over the joint menu); bf16 sums and fp32 maxima are not bound
    by it; a row longer than the widest tile times the chain still has a design (the widest tile)."""
    import itertools

    from formloop.library import rowwise

    chip = get_chip("h200")
    menus = [d.decision.menu for d in (rowwise.BC, rowwise.RP, rowwise.W, rowwise.S)]

    def admitted(op, dtype, R, C):
        t, wl = rowwise.make(op, dtype), workload(R, C, dtype)
        return [d for d in (dict(zip(("BC", "RP", "W", "S"), v)) for v in itertools.product(*menus))
                if not t.check(d, wl, chip)]

    for op in ("sum", "mean"):
        fp32 = admitted(op, "fp32", 32768, 32768)
        assert fp32 and all(-(-32768 // d["BC"]) <= rowwise.FP32_SUM_CHAIN for d in fp32)
    assert any(-(-32768 // d["BC"]) > rowwise.FP32_SUM_CHAIN for d in admitted("sum", "bf16", 32768, 32768))
    assert any(-(-32768 // d["BC"]) > rowwise.FP32_SUM_CHAIN for d in admitted("max", "fp32", 32768, 32768))
    assert {d["BC"] for d in admitted("sum", "fp32", 1, 1_000_000)} == {rowwise.BC.decision.menu[-1]}
    assert rowwise.solved_design("sum", 32768, 32768, "fp32")["BC"] * rowwise.FP32_SUM_CHAIN >= 32768
