"""gemm-epilogue-gpu: the GEMM family's contract extended by an epilogue. Its proof (K1, K3, the
shared index obligations, glu's output columns), its extra walls, and its cost terms against hand
counts of the epilogue's bytes and operations."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere (the program test runs a kernel)

from dataclasses import replace  # noqa: E402

import pytest  # noqa: E402

from formloop.expr import evaluate  # noqa: E402
from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library import get_template  # noqa: E402
from formloop.library import gemm_epilogue as ge  # noqa: E402
from formloop.library import gemm_tiling_gpu as base  # noqa: E402
from formloop.verify import check_instance, check_k1, prove_template  # noqa: E402

CHIP = get_chip("h200")
DESIGN = {"Tm": 128, "Tn": 128, "Tk": 64, "S": 4, "W": 8, "KS": 1, "G": 8, "L": 1}


def _template(epilogue: str = "", out: str | None = None):
    return get_template(ge.NAME, dtype="bf16", out=out, epilogue=epilogue)


@pytest.mark.parametrize("epilogue", ["", "bias(axis=row,name=bias) >> softmax", "glu(act=silu) >> add(name=r)"])
def test_template_is_proved(epilogue):
    cert = prove_template(_template(epilogue))
    assert cert.verdict.value == "proved", [(o.obligation, o.verdict.value) for o in cert.obligations]
    names = {o.obligation.split("[")[0] for o in cert.obligations}
    assert {"K1", "K3", "split_k_partition", "coverage", "exact-once", "no-phantom", "swizzle_bijective"} <= names
    glu_columns = {o.obligation.split("[")[0] for o in cert.obligations if "[N_out," in o.obligation}
    assert (glu_columns == {"coverage", "exact-once", "no-phantom"}) == ("glu" in epilogue)


def test_glu_fault_is_a_replayed_counterexample():
    results = ge.glu_obligations(5.0, fault="unhalved-offset")
    bad = [r for r in results if r.verdict.value == "counterexample"]
    assert bad and all(r.replay for r in bad)
    first = bad[0]
    kinds, _ = ge.replay_glu(first.details["tile"], first.witness["N_out"], first.witness["index"], "unhalved-offset")
    assert kinds, "the replay confirms the witness"


def test_row_precondition_needs_the_row_wall():
    t = _template("softmax")
    assert check_k1(t, fixed=ge.proof_plan(t, "bf16", False).fixed).verdict.value == "proved"
    weak = replace(t, constraints=tuple(c for c in t.constraints if c.name != "E1"))
    result = check_k1(weak, fixed=ge.proof_plan(weak, "bf16", False).fixed)
    assert result.verdict.value == "counterexample"
    assert result.witness["Tn"] < result.witness["N"]


def test_walls_of_the_epilogue():
    wl = ge.workload(256, 200, 1024, "bf16")
    soft = _template("softmax")
    assert {v.name for v in check_instance(soft, DESIGN, wl, CHIP).violations} == {"E1", "row_single_tile"}
    assert check_instance(soft, {**DESIGN, "Tn": 256}, wl, CHIP).ok
    # a residual tile beside a 128x256 accumulator on 4 warps: 2 * 32768 / 128 = 512 values per thread
    res = _template("add(name=r)")
    wide = {**DESIGN, "Tn": 256, "W": 4, "S": 3}
    assert "E2" in {v.name for v in check_instance(res, wide, ge.workload(256, 256, 256, "bf16"), CHIP).violations}
    # on 8 warps the epilogue in column halves holds half the residual beside the accumulator:
    # 128 + 64 = 192 values per thread (admitted); a chain with a row operation runs on the whole
    # tile and holds all of it (128 + 128)
    eight = {**wide, "W": 8, "Tk": 64, "S": 4}
    assert "E2" not in {v.name for v in check_instance(res, eight, ge.workload(4096, 4096, 4096, "bf16"),
                                                        CHIP).violations}
    row = _template("add(name=r) >> softmax")
    assert "E2" in {v.name for v in check_instance(row, eight, ge.workload(4096, 256, 4096, "bf16"),
                                                    CHIP).violations}
    conv = ge.workload(256, 256, 256, "bf16", gather_=1)
    assert {v.name for v in check_instance(_template(), DESIGN, conv, CHIP).violations} == {"C6"}
    assert check_instance(_template(), {**DESIGN, "L": 0}, conv, CHIP).ok


def test_col_major_operand_pitch_is_what_the_copy_engine_needs():
    t = _template()
    # A stored by columns: its pitch is M (= 1000, 2000 bytes: aligned) even though K = 1001 is not.
    ok = ge.workload(1000, 512, 1001, "bf16", pa_=1000, pb_=512)
    assert {v.name for v in check_instance(t, DESIGN, ok, CHIP).violations} == set()
    bad = ge.workload(1001, 512, 1001, "bf16", pa_=1001, pb_=512)
    assert {v.name for v in check_instance(t, DESIGN, bad, CHIP).violations} == {"C5"}


def test_cost_counts_the_epilogue_bytes_and_operations():
    M, N, K = 4096, 4096, 4096
    wl = ge.workload(M, N, K, "bf16")
    plain, chained = _template(), _template("bias(axis=row,name=bias) >> gelu(approx=tanh) >> add(name=r)")
    vp, vc = plain.bind(wl, CHIP), chained.bind(wl, CHIP)
    tp, tc = plain.evaluate_terms(DESIGN, vp), chained.evaluate_terms(DESIGN, vc)
    # DRAM bytes: the residual tile (2 bytes per element) and the bias (2 bytes per column) more.
    base_bytes = _eval(base.bytes_dram, {**vp, **DESIGN})
    assert tc["T_mem_us"] / tp["T_mem_us"] == pytest.approx((base_bytes + 2 * M * N + 2 * N) / base_bytes, rel=1e-9)
    # SIMT work: 2 (bias) + 20 (gelu) + 2 (add) operations per element at the SM's fp32 rate, per wave.
    waves = -(-((M // 128) * (N // 128)) // 132)
    per_sm = CHIP.peak("fp32") / (2 * 132)
    assert tc["T_comp_us"] - tp["T_comp_us"] == pytest.approx(waves * 128 * 128 * 24 / per_sm * 1e6, rel=1e-9)


def test_glu_and_row_reduction_shrink_the_output_bytes():
    M, N, K = 2048, 256, 4096
    wl = ge.workload(M, N, K, "bf16")
    plain, lse = _template(out="fp32"), _template("logsumexp", out="fp32")
    design = {**DESIGN, "Tn": 256}
    vp = plain.bind(wl, CHIP)
    base_bytes = _eval(base.bytes_dram, {**vp, **design})
    ratio = lse.evaluate_terms(design, vp)["T_mem_us"] / plain.evaluate_terms(design, vp)["T_mem_us"]
    # plain fp32 C: 4 bytes per element (2 counted by the base); logsumexp: 4 bytes per row.
    assert ratio == pytest.approx((base_bytes - 2 * M * N + 4 * M) / (base_bytes + 2 * M * N), rel=1e-9)


def _eval(expr, env):
    return float(evaluate(expr, env))


def test_template_program_runs_its_instance():
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from formloop.evaluate.gpu import check

    t = _template("gelu(approx=erf)", out="fp32")
    inst = t.program({**DESIGN, "Tm": 16, "Tn": 32, "Tk": 32, "L": 0}, ge.workload(33, 40, 64, "bf16"))
    assert check(inst, "cpu", torch.Generator().manual_seed(0)).passed


@pytest.mark.parametrize("design,shape,two", [
    ({"Tm": 128, "Tn": 128, "Tk": 64, "S": 3, "W": 4}, (4096, 4096, 4096), True),    # 96 KiB of stages
    ({"Tm": 128, "Tn": 128, "Tk": 64, "S": 4, "W": 4}, (4096, 4096, 4096), False),   # 128 KiB: one block
    ({"Tm": 128, "Tn": 256, "Tk": 32, "S": 3, "W": 8}, (4096, 4096, 4096), False),   # 32768 values + others
    ({"Tm": 128, "Tn": 128, "Tk": 64, "S": 3, "W": 4}, (1024, 1024, 4096), False),   # 64 blocks < 132 SMs
], ids=["two-blocks", "smem", "regs", "one-wave"])
def test_the_epilogue_is_half_hidden_where_two_blocks_share_an_sm(design, shape, two):
    # the chain's epilogue time (T_comp with the chain minus without it) against the formula on
    # numbers: waves * Tm * Tn * ops SIMT operations at the SM's fp32 rate, halved with two blocks
    d = {**DESIGN, **design}
    wl = ge.workload(*shape, "bf16")
    chain, plain = _template("bias(axis=row,name=bias) >> gelu(approx=tanh)"), _template()
    v = chain.bind(wl, CHIP)
    epi = chain.evaluate_terms(d, v)["T_comp_us"] - plain.evaluate_terms(d, plain.bind(wl, CHIP))["T_comp_us"]
    waves = -(-(-(-shape[0] // d["Tm"]) * -(-shape[1] // d["Tn"])) // CHIP.sm_count)
    ops = 2 + 20  # bias, gelu (gemm_epilogue_ops.KINDS)
    full = waves * d["Tm"] * d["Tn"] * ops / (CHIP.peak("fp32") / (2 * CHIP.sm_count)) * 1e6
    assert epi == pytest.approx(full * (1 - ge.EPI_OVERLAP if two else 1), rel=1e-9)
