"""gemv-epilogue-gpu, checked independently of its own code paths: the MILP pick equals brute-force enumeration
and passes the instance check; the walls V1..V4 recomputed by hand accept exactly the designs the check accepts;
scope and bad input give named errors; the one-row (Tm = 1) kernel matches a float64 torch reference written here
in Triton's interpreter (tails, split-K, chains; output poisoned first; negative controls); TileConfig's Tm = 1
rules; the index obligations and K1/K3 prove; the decode layer plan takes the faster family by its own numbers."""
from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library import get_template  # noqa: E402
from formloop.library import gemv_epilogue as gv  # noqa: E402
from formloop.solve import enumerate_designs, solve_milp  # noqa: E402

CHIP = get_chip("h200")
F = torch.nn.functional


@pytest.mark.parametrize("chain", ["", "add(name=residual)", "glu(act=silu)"])
def test_milp_matches_enumeration_and_passes_check(chain):
    t = get_template(gv.NAME, epilogue=chain)
    for M, N, K in [(1, 6144, 4096), (1, 4096, 12288), (1, 24576, 4096), (3, 1000, 4000)]:
        wl = gv.workload(M, N, K)
        f = t.formulate(wl, CHIP)
        milp, brute = solve_milp(f), enumerate_designs(f)
        assert milp.objective == pytest.approx(brute.objective, rel=1e-6), (M, N, K)
        assert t.check(milp.assignment, wl, CHIP) == [], (M, N, K, milp.assignment)


@pytest.mark.parametrize("dtype,K", [("bf16", 640), ("fp32", 3000)])
def test_walls_by_hand_accept_exactly_what_check_accepts(dtype, K):
    """K is small enough that V4 bites at the menu's Tk; every wall fails somewhere and some design passes."""
    t = get_template(gv.NAME, dtype=dtype)
    wl, e, smem = gv.workload(1, 4096, K, dtype), {"bf16": 2, "fp32": 4}[dtype], CHIP.smem_per_block
    names = t.decision_names
    seen = set()
    accepted = 0
    for values in itertools.product(*(d.decision.menu for d in t.decisions)):
        a = dict(zip(names, values))
        tn, tk, s, w, ks = (a[k] for k in ("Tn", "Tk", "S", "W", "KS"))
        walls = {"V1": tn * tk <= 64 * 32 * w, "V2": tn * tk * e >= 16 * 32 * w,
                 "V3": s * (tn + 1) * tk * e <= smem, "V4": ks <= math.ceil(K / tk)}
        failing = {k for k, ok in walls.items() if not ok}
        got = t.check(a, wl, CHIP)
        assert {v.name for v in got} == failing, (a, [str(v) for v in got])
        assert all(v.kind == "constraint" for v in got)
        seen |= failing
        accepted += not failing
    assert seen == {"V1", "V2", "V3", "V4"} and accepted > 0


def test_scope_and_named_errors():
    t = get_template(gv.NAME)
    with pytest.raises(InvalidInput, match="few_rows"):
        t.formulate(gv.workload(gv.MAX_ROWS + 1, 4096, 4096), CHIP)
    bad = t.check({"Tn": 8, "Tk": 512, "S": 2, "W": 4, "KS": 1}, gv.workload(9, 4096, 4096), CHIP)
    assert [(v.kind, v.name) for v in bad] == [("scope", "few_rows")]
    assert t.formulate(gv.workload(gv.MAX_ROWS, 4096, 4096), CHIP)  # the boundary is in scope
    with pytest.raises(InvalidInput, match="glu_even"):
        get_template(gv.NAME, epilogue="glu(act=silu)").formulate(gv.workload(1, 4097, 4096), CHIP)
    with pytest.raises(InvalidInput, match="dtype"):
        gv.workload(1, 4096, 4096, dtype="int8")
    with pytest.raises(InvalidInput, match="calibration"):
        get_template(gv.NAME, calibration={"no_such_term": 1.0}).formulate(gv.workload(1, 64, 64), CHIP)
    with pytest.raises(InvalidInput, match="dtype"):
        get_template(gv.NAME, dtype="tf32")


def test_calibration_moves_the_objective_by_the_launch_term():
    """t_launch is additive in the cost: +3 us of launch moves the optimum by exactly 3 us."""
    wl = gv.workload(1, 6144, 4096)
    base = solve_milp(get_template(gv.NAME).formulate(wl, CHIP)).objective
    more = solve_milp(get_template(gv.NAME, calibration={"t_launch": gv.PRIORS["t_launch"] + 3e-6})
                      .formulate(wl, CHIP)).objective
    assert more - base == pytest.approx(3.0, rel=1e-6)


def _reference(chain: str, inputs) -> torch.Tensor:
    """float64 C = chain(A·B), written here from the chain's documented meaning."""
    acc = inputs["a"].double() @ inputs["b"].double()
    if chain == "add(name=residual)":
        return acc + inputs["residual"].double()
    if chain == "glu(act=silu)":  # adjacent columns pair as (gate, up)
        return F.silu(acc[:, 0::2]) * acc[:, 1::2]
    if chain == "bias(axis=row) >> gelu(approx=tanh)":
        return F.gelu(acc + inputs["bias"].double()[None, :], approximate="tanh")
    if chain == "relu":
        return F.relu(acc)
    assert chain == ""
    return acc


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref.double()).norm() / ref.double().norm())


def _design(Tn, Tk, KS, S=2, W=4):
    return {"Tn": Tn, "Tk": Tk, "S": S, "W": W, "KS": KS}


KERNEL_CASES = [  # ((M, N, K), design, chain): N and K tails, split-K 1..3, small tiles (program() checks no walls)
    ((1, 40, 96), _design(8, 32, 1), ""),
    ((1, 40, 96), _design(4, 32, 3), "bias(axis=row) >> gelu(approx=tanh)"),
    ((2, 20, 80), _design(4, 16, 3, S=1), "add(name=residual)"),
    ((2, 20, 80), _design(2, 16, 2), "glu(act=silu)"),
    ((2, 20, 80), _design(8, 16, 1), "relu"),
    ((1, 64, 256), _design(8, 32, 2, S=3), "glu(act=silu)"),
    ((1, 64, 256), _design(2, 16, 3, W=1), ""),
    ((3, 36, 100), _design(8, 32, 2), "add(name=residual)"),
]


@pytest.mark.parametrize("shape,design,chain", KERNEL_CASES)
def test_one_row_kernel_matches_float64(shape, design, chain):
    M, N, K = shape
    inst = gv.program(design, gv.workload(M, N, K), "bf16", "bf16", chain)
    assert inst.plan.config.Tm == 1 and inst.plan.config.simt
    assert inst.plan.grid == (M * math.ceil(N / design["Tn"]), design["KS"], 1)
    case = inst.new_case("cpu", torch.Generator().manual_seed(sum(shape)))
    assert case.inputs["b"].T.is_contiguous()  # B as a linear layer's weight [N, K]
    assert tuple(case.out.shape) == (M, N // 2 if chain.startswith("glu") else N)
    assert torch.isnan(case.out).all()
    for _ in range(2):  # twice: split-K's counters must be reset for the next launch
        inst.poison(case)
        inst.launch(case)
        out = inst.output(case)
        assert not torch.isnan(out).any()
        assert _rel(out, _reference(chain, case.inputs)) <= inst.tolerance
        assert _rel(out, inst.reference(case)) <= inst.tolerance


def test_negative_controls_fail_the_check():
    """A kernel that skipped the last k-tile (here: the last split) or wrote one wrong value would be caught."""
    inst = gv.program(_design(4, 32, 3), gv.workload(1, 40, 96), "bf16", "bf16", "")
    case = inst.new_case("cpu", torch.Generator().manual_seed(7))
    inst.launch(case)
    out = inst.output(case)
    ref = _reference("", case.inputs)
    assert _rel(out, ref) <= inst.tolerance
    a, b = case.inputs["a"].double(), case.inputs["b"].double()
    short = a[:, :64] @ b[:64, :]  # without the third k-tile
    assert _rel(out, short) > 10 * inst.tolerance
    bad = out.clone()
    bad[0, -1] += 1.0  # last column, in the N-tail tile
    assert _rel(bad, ref) > inst.tolerance


def test_tile_config_one_row_rules():
    from formloop.library.gemm_tiling_kernel import GemmPlan, TileConfig
    assert TileConfig(Tm=1, Tn=2, Tk=16).simt
    assert not TileConfig(Tm=16, Tn=16, Tk=16).simt
    with pytest.raises(InvalidInput, match="L"):
        TileConfig(Tm=1, Tn=8, Tk=32, L=1)
    with pytest.raises(InvalidInput, match="Tn"):
        TileConfig(Tm=1, Tn=3, Tk=32)
    with pytest.raises(InvalidInput, match="Tk"):
        TileConfig(Tm=1, Tn=8, Tk=8)
    with pytest.raises(InvalidInput, match="Tm"):
        TileConfig(Tm=8, Tn=16, Tk=16)
    with pytest.raises(InvalidInput, match="gemv-epilogue-gpu"):
        GemmPlan(TileConfig(Tm=1, Tn=8, Tk=32), 4, 4, 4)


def test_index_obligations_prove_for_every_menu_value():
    """All ~50 Z3 queries take well under a second, so the whole plan runs."""
    from formloop.verify.certificate import ProofRun, prove_template
    from formloop.verify.outcome import Verdict
    t = get_template(gv.NAME)
    results = t.obligations(t).checks[0](ProofRun(scope=None, timeout_s=10))
    assert results and all(r.verdict is Verdict.PROVED for r in results), \
        [(r.obligation, r.verdict) for r in results if r.verdict is not Verdict.PROVED]
    names = {r.obligation for r in results}
    assert {f"split_k_partition[Tk={tk},KS={ks}]" for tk in gv.Tk.decision.menu for ks in gv.KS.decision.menu} <= names
    assert {f"{k}[N,Tn={tn}]" for tn in gv.Tn.decision.menu for k in ("coverage", "exact-once", "no-phantom")} <= names
    assert {"coverage[M,Tm=1]", "exact-once[M,Tm=1]", "no-phantom[M,Tm=1]"} <= names
    for chain in ("", "glu(act=silu)"):  # K1, K3 and the index obligations together
        cert = prove_template(get_template(gv.NAME, epilogue=chain))
        assert cert.verdict is Verdict.PROVED, [(r.obligation, r.verdict) for r in cert.obligations
                                                if r.verdict is not Verdict.PROVED]


@pytest.mark.parametrize("part", [(1, 6144, 4096, ""), (8, 24576, 4096, "glu(act=silu)")])
def test_layer_plan_takes_the_faster_family(part):
    from formloop.library.qwen3_layer_plan import GemmPart, _solve_gemm
    p = _solve_gemm("qkv", GemmPart(*part), CHIP, None)
    by = p.detail["model_us_by_template"]
    assert set(by) == {"gemm-epilogue-gpu", gv.NAME}
    assert p.time_us == pytest.approx(min(by.values()), rel=1e-9)
    assert p.detail["template"] == min(by, key=by.get)
    assert (p.design["Tm"] == 1) == (p.detail["template"] == gv.NAME)
    if p.detail["template"] == gv.NAME:  # the design is a valid gemv design at the part's shape
        wl = gv.workload(*part[:3])
        assert get_template(gv.NAME, epilogue=part[3]).check(p.design, wl, CHIP) == []
        assert p.design["L"] == 0 and p.design["G"] == 1
    if part[0] == 1:
        assert p.detail["template"] == gv.NAME  # the decode qkv GEMV beats the 16-row-padded tensor-core pick


def test_layer_plan_skips_gemv_beyond_its_rows():
    from formloop.library.qwen3_layer_plan import GemmPart, _solve_gemm
    p = _solve_gemm("qkv", GemmPart(128, 6144, 4096), CHIP, None)
    assert "model_us_by_template" not in p.detail
    assert p.detail["template"] == "gemm-epilogue-gpu" and p.design["Tm"] != 1



def _cli(*args):
    return subprocess.run([sys.executable, "-m", "formloop.cli", *args], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})


def test_cli_solves_the_family_and_names_the_scope():
    """`formloop solve gemv-epilogue-gpu`: the MILP and the enumeration agree on a decode GEMM with a chain,
    the design passes the walls; M = 9 is refused naming the scope rule."""
    args = ("solve", gv.NAME, "--shape", "1,4096,12288", "--dtype", "bf16", "--option", "epilogue=add(name=residual)",
            "--json")
    milp = _cli(*args)
    assert milp.returncode == 0, milp.stderr
    a = json.loads(milp.stdout)
    b = json.loads(_cli(*args, "--solver", "enumerate").stdout)
    assert a["objective"] == pytest.approx(b["objective"], rel=1e-6)
    t = get_template(gv.NAME, dtype="bf16", epilogue="add(name=residual)")
    assert t.check(a["design"], gv.workload(1, 4096, 12288), get_chip("h200")) == []
    bad = _cli("solve", gv.NAME, "--shape", "9,4096,12288", "--dtype", "bf16")
    assert bad.returncode != 0 and "few_rows" in bad.stdout + bad.stderr


@pytest.mark.parametrize("shape,Tn,Tk,chain", [((1, 40, 96), 8, 32, ""), ((1, 32, 128), 4, 16, "glu(act=silu)"),
                                               ((3, 20, 80), 8, 32, "add(name=residual)")])
def test_a_norm_prologue_is_rmsnorm_then_the_product(shape, Tn, Tk, chain):
    """a_norm: the kernel computes chain(rmsnorm(A)·g · B) in one loop; checked against float64 written
    here, and the result does not move when A is scaled (the norm's defining property)."""
    import torch.nn.functional as F

    M, N, K = shape
    inst = gv.program({"Tn": Tn, "Tk": Tk, "S": 2, "W": 4, "KS": 1}, gv.workload(M, N, K), "bf16", "bf16", chain,
                      a_norm=True)
    case = inst.new_case("cpu", torch.Generator().manual_seed(M + N))
    outs = []
    for scale in (1.0, 8.0):   # a power of two: the bf16 inputs scale exactly
        case.inputs["a"].copy_(case.inputs["a"] * scale)
        inst.poison(case)
        inst.launch(case)
        outs.append(inst.output(case).clone())
        a = case.inputs["a"].double()
        acc = (a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * case.inputs["a_norm_weight"].double()) \
            @ case.inputs["b"].double()
        want = F.silu(acc[:, 0::2]) * acc[:, 1::2] if chain.startswith("glu") else \
            acc + case.inputs["residual"].double() if chain else acc
        assert not torch.isnan(outs[-1]).any()
        assert _rel(outs[-1], want) <= inst.tolerance
    assert _rel(outs[1], outs[0]) <= 1e-2


def test_a_norm_rules():
    """a_norm needs the one-row GEMV with one split (plan, template wall V5) and a row-major A (spec)."""
    from formloop.library.gemm_epilogue_emit import KernelSpec, Shape
    from formloop.library.gemm_epilogue_kernel import EpiloguePlan
    from formloop.library.gemm_tiling_kernel import TileConfig

    spec = KernelSpec(ab="bf16", c="bf16", lb="col", name="g", a_norm=True)
    with pytest.raises(InvalidInput, match="a_norm"):
        EpiloguePlan(spec, TileConfig(Tm=1, Tn=8, Tk=32, KS=2), Shape(1, 16, 128))
    with pytest.raises(InvalidInput, match="a_norm"):
        EpiloguePlan(spec, TileConfig(Tm=16, Tn=16, Tk=32), Shape(1, 16, 128))
    with pytest.raises(InvalidInput, match="a_norm"):
        KernelSpec(ab="bf16", c="bf16", la="col", lb="col", a_norm=True)
    with pytest.raises(InvalidInput, match="a_norm"):
        get_template(gv.NAME, a_norm="maybe")
    t = get_template(gv.NAME, a_norm="true")
    wl, chip = gv.workload(1, 6144, 4096), get_chip("h200")
    assert ("constraint", "V5") in {(v.kind, v.name) for v in t.check(
        {"Tn": 8, "Tk": 512, "S": 1, "W": 4, "KS": 2}, wl, chip)}
    f = t.formulate(wl, chip)
    s, e = solve_milp(f), enumerate_designs(f)
    assert s.assignment["KS"] == 1 and s.objective == pytest.approx(e.objective, rel=1e-6)
    plain = solve_milp(get_template(gv.NAME).formulate(wl, chip)).objective
    assert s.objective >= plain   # the norm weight is read too, and no design is added
