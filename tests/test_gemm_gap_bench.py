"""benchmarks/gemm_gap.py off the GPU: the design set (pick, the model's top distinct tilings in model order, a
seeded uniform draw of further tilings), the cuBLAS kernel-name parser on realistic names (expected values written
by hand), the summary's tile matching in both orientations on a synthetic profile, and the dry run end to end."""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import SimpleNamespace

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere (the dry run launches kernels)

import pytest  # noqa: E402

ROOT = Path(__file__).parents[1]
XMMA_OFF = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cluster1x2x1_warpgroupsize2x1x1_"
            "execute_segment_k_off_kernel__5x_cublas")
XMMA_ON = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x128x64_warpgroupsize1x1x1_"
           "execute_segment_k_on_kernel__5x_cublas")
NVJET = "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT"
REDUCE = "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true>"
CUTLASS = "cutlass::Kernel2<...>"


@pytest.fixture(scope="module")
def gap():
    spec = importlib.util.spec_from_file_location("gemm_gap_bench", ROOT / "benchmarks" / "gemm_gap.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def formulation():
    from formloop.hw.chips import get_chip
    from formloop.library import get_template
    from formloop.library.gemm_tiling import workload

    t = get_template("gemm-tiling-gpu", dtype="bf16", schedules=True)
    return t.formulate(workload((64, 4096, 4096), "bf16"), get_chip("h200"))


def _tiling(a):
    return tuple(int(a[k]) for k in ("Tm", "Tn", "Tk", "S", "W", "KS", "SC"))


def test_design_set_pick_top_random(gap, formulation):
    from formloop.solve import enumerate_designs

    f = formulation
    ranked = gap.gemm.top_designs(f, 10 ** 6)
    ds = gap.design_set(f, ranked, 6, 7, seed=0)
    sol = enumerate_designs(f)
    assert ds[0]["source"] == "pick" and ds[0]["design"] == dict(sol.assignment)
    assert ds[0]["model_us"] == pytest.approx(sol.objective)
    assert [d["source"] for d in ds] == ["pick"] + ["model-top"] * 6 + ["random"] * 7
    tilings = [_tiling(d["design"]) for d in ds]
    assert len(set(tilings)) == len(tilings)
    # the model-top ones: the first six new tilings in model order, each as its cheapest design
    expect, seen = [], {tilings[0]}
    for a in ranked:
        if len(expect) == 6:
            break
        if _tiling(a) not in seen:
            seen.add(_tiling(a))
            expect.append(a)
    top = [d for d in ds if d["source"] == "model-top"]
    assert [d["design"] for d in top] == expect
    assert [d["model_rank"] for d in top] == sorted(d["model_rank"] for d in top)
    assert [d["model_us"] for d in top] == sorted(d["model_us"] for d in top)
    for d in ds:  # rank: position in the model's order over every feasible design
        assert ranked[d["model_rank"]] == d["design"]
    rnd = [d for d in ds if d["source"] == "random"]
    assert not {_tiling(d["design"]) for d in rnd} & {_tiling(d["design"]) for d in ds if d["source"] != "random"}
    again = gap.design_set(f, ranked, 6, 7, seed=0)
    other = gap.design_set(f, ranked, 6, 7, seed=1)
    assert again == ds
    assert other[:7] == ds[:7] and [d["design"] for d in other[7:]] != [d["design"] for d in rnd]


def test_parse_cublas_kernel_names(gap):
    assert gap.parse_kernel(XMMA_OFF) == {
        "name": XMMA_OFF, "family": "xmma", "tile": [128, 128, 64], "stages": None, "cluster": [1, 2, 1],
        "warpgroup": [2, 1, 1], "split_k": False, "segment_k": "off", "reduce": False, "layout": "tn"}
    assert gap.parse_kernel(XMMA_ON) == {
        "name": XMMA_ON, "family": "xmma", "tile": [64, 128, 64], "stages": None, "cluster": None,
        "warpgroup": [1, 1, 1], "split_k": False, "segment_k": "on", "reduce": False, "layout": "nn"}
    assert gap.parse_kernel(NVJET) == {
        "name": NVJET, "family": "nvjet", "tile": [256, 128, 64], "stages": 4, "cluster": [1, 2, 1],
        "warpgroup": None, "split_k": False, "segment_k": None, "reduce": False, "layout": "ntt"}
    assert gap.parse_kernel(CUTLASS) == {
        "name": CUTLASS, "family": "cutlass", "tile": None, "stages": None, "cluster": None, "warpgroup": None,
        "split_k": False, "segment_k": None, "reduce": False, "layout": None}
    assert gap.parse_kernel("splitKreduce_kernel") == {
        "name": "splitKreduce_kernel", "family": "reduce", "tile": None, "stages": None, "cluster": None,
        "warpgroup": None, "split_k": True, "segment_k": None, "reduce": True, "layout": None}


def _event(name, us, cuda=True):
    from torch.autograd import DeviceType

    return SimpleNamespace(name=name, device_type=DeviceType.CUDA if cuda else DeviceType.CPU,
                           time_range=SimpleNamespace(elapsed_us=lambda: us))


def test_summary_matches_cublas_tile_in_both_orientations(gap):
    events = [_event(XMMA_ON, 10.0) for _ in range(4)] + [_event(REDUCE, 2.0) for _ in range(4)]
    events += [_event("cudaLaunchKernel", 3.0, cuda=False), _event("Memset (Device)", 1.0)]
    kernels = gap.kernels_of(events, calls=4)
    assert [(k["name"], k["calls"], k["per_matmul"], k["mean_us"]) for k in kernels] == [
        (XMMA_ON, 4, 1.0, 10.0), (REDUCE, 4, 1.0, 2.0)]
    view = gap.cublas_view({"calls": 4, "eager": kernels, "graph": kernels})
    assert view["tile"] == [64, 128, 64] and view["split_k"] and view["reduce_kernel"]
    assert view["main_kernel"] == XMMA_ON and view["same_kernels_eager_and_graph"]
    ok = {"rel_error": 1e-3, "max_error_rms": 1e-3, "tolerance": 1e-2, "all_written": True, "reference": "float64"}

    def rec(tm, tn, us, src, rank, check=ok):
        d = {"design": {"Tm": tm, "Tn": tn, "Tk": 64, "S": 3, "W": 4, "KS": 1, "G": 8, "L": 1, "SC": 0},
             "source": src, "model_rank": rank, "model_us": 1.0 + rank, "check": check}
        if us is not None:
            d["graph"] = {"us": us}
        return d
    bad = {**ok, "all_written": False, "rel_error": float("nan")}
    row = {"shape": [64, 4096, 4096], "torch": {"graph": {"us": 20.0}},
           "designs": [rec(64, 64, 30.0, "pick", 0), rec(128, 64, 25.0, "model-top", 3),
                       rec(128, 64, 26.0, "random", 900), rec(32, 32, None, "random", 50, bad)]}
    s = gap.summarize_shape(row, view, {(64, 128): 7, (128, 64): 3, (64, 64): 0})
    assert s["best"]["graph_us"] == 25.0 and s["best"]["source"] == "model-top" and s["best"]["model_rank"] == 3
    assert s["ratio_cublas_over_best"] == pytest.approx(0.8)
    assert (s["measured"], s["passed"], s["timed"], s["failed"]) == (4, 3, 3, 1)
    assert s["failures"][0]["reason"].startswith("check failed")
    assert s["near_best_fraction"] == pytest.approx(2 / 3)
    assert s["by_source"]["random"]["best"]["graph_us"] == 26.0 and s["random_beats_model_top"] is False
    at = s["at_cublas_tile"]
    assert at["as_named"]["measured"] == 0 and at["as_named"]["family_best_model_rank"] == 7
    assert at["transposed"]["best"]["graph_us"] == 25.0 and at["transposed"]["measured"] == 2
    assert at["matched_nothing"] == ["as_named"]


def test_dry_run_writes_finite_json_with_a_summary_per_shape(gap, tmp_path, capsys):
    assert gap.main(["--dry-run", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "gemm_gap.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    result = json.loads(text)
    assert result["source"] == gap.CPU_SOURCE and result["precompile"] == gap.NO_GPU
    assert [r["shape"] for r in result["shapes"]] == [list(s) for s in gap.gemm_eager.DRY_SHAPES]
    for r in result["shapes"]:
        s = r["summary"]
        assert r["cublas_profile"] == gap.NO_GPU and s["measured"] == 5 and s["timed"] >= 1
        assert [d["source"] for d in r["designs"]] == ["pick", "model-top", "model-top", "random", "random"]
        assert s["best"]["graph_us"] > 0 and s["cublas_graph_us"] > 0
    out = capsys.readouterr().out
    assert "interpreter (cpu wall time: not a GPU figure)" in out and "us" in out


def test_deep_stage_designs_keep_the_fastest_tilings_and_fit_shared_memory(gap):
    """Off-menu designs: the three fastest distinct tilings (tile, warps, split, schedule, group, path), each at
    Tk 64 and 128 with the given stages where S·(Tm + Tn)·Tk·2 bytes fit 227 KiB, written out by hand here."""
    def rec(us, **a):
        return {"graph": {"us": us}, "design": {"Tk": 128, "S": 3, "W": 4, "KS": 1, "SC": 0, "G": 8, "L": 1, **a}}
    timed = [rec(9.0, Tm=64, Tn=32), rec(8.0, Tm=128, Tn=64), rec(8.5, Tm=64, Tn=32, S=5), rec(9.5, Tm=256, Tn=128),
             rec(7.0, Tm=64, Tn=64, W=8)]
    out = gap.deep_stage_designs(timed, (8, 16))
    tiles = {(d["Tm"], d["Tn"], d["W"]) for d in out}
    assert tiles == {(64, 64, 8), (128, 64, 4), (64, 32, 4)}  # 256x128 is the fourth fastest tiling: left out
    got = sorted((d["Tm"], d["Tn"], d["Tk"], d["S"]) for d in out)
    # 64x64: only Tk 64 at 8 stages (128 KiB; 8 x 128 x 128 x 2 = 256 KiB is out); 128x64: Tk 64 at 8 (192 KiB);
    # 64x32: Tk 64 at 8 and 16 (96, 192 KiB), Tk 128 at 8 (192 KiB)
    want = sorted([(64, 64, 64, 8), (128, 64, 64, 8), (64, 32, 64, 8), (64, 32, 64, 16), (64, 32, 128, 8)])
    assert got == want
