"""Plan one Qwen3 layer scenario: each part's design and model time from its own template, then the
fusion choice by solving qwen3-layer (HiGHS), with every choice's cost beside it.

A plan is data (plan once, run many): the fusion, the GEMM tile designs (gemm-epilogue-gpu, or for
decode rows gemv-epilogue-gpu, with the part's chain), the attention design, and the model time of
every part in us. The executor (qwen3_layer_kernels) builds the kernels from it."""
from __future__ import annotations

from collections.abc import Mapping
import copy
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from formloop.hw.chips import get_chip
from formloop.library import attention_service, elementwise, gemm_epilogue, gemv_epilogue, get_template, rowwise
from formloop.library.qwen3_layer import Qwen3Config, Scenario, check_config
from formloop.library.qwen3_layer_template import (NAME, NORM_PARTS, PARTS, PDL_FIXED, ROPE_INSIDE_PRIOR_US,
                                                   ROPE_PARTS, T_PDL_PRIOR, Fusion, all_fusions, stream_us)
from formloop.solve import enumerate_designs, solve_milp

E = 2  # bf16 bytes
GEMM_TEMPLATE = gemm_epilogue.NAME


@dataclass(frozen=True)
class GemmPart:
    """C[M, N] = chain(A[M, K] · Wᵀ), W as nn.Linear keeps it ([N, K])."""

    M: int
    N: int
    K: int
    chain: str = ""
    norm: bool = False  # A's rows RMS-normalized in the GEMV's loop (gemv-epilogue-gpu a_norm; decode only)


@dataclass(frozen=True)
class AttentionPart:
    template: str
    shape: str  # B,Hq,Hkv,D,L
    rope: "RopePart | None" = None  # decode with the q/k norm + RoPE + KV write inside (the layer's RA)


@dataclass(frozen=True)
class RowPart:
    """A rowwise-<op> kernel over [R, C]."""

    op: str
    R: int
    C: int


@dataclass(frozen=True)
class EwPart:
    """An elementwise chain over [M, N]."""

    chain: str
    M: int
    N: int


@dataclass(frozen=True)
class RopePart:
    """qk-norm-rope-kv over T tokens."""

    T: int
    Hq: int
    Hkv: int
    D: int


@dataclass(frozen=True)
class StreamPart:
    """A copy kernel of this module's own (the prefill relayout): launch + bytes at the copy rate."""

    bytes: int


ADD = "add(name=residual)"
SILU_MUL = "silu >> mul(name=up)"
ROPE_TEMPLATE = "qk-norm-rope-kv"


def part_specs(cfg: Qwen3Config, sc: Scenario) -> dict[str, Any]:
    """Every part of the layer for the scenario (the template's PARTS), with what its cost reads."""
    t, h, i = sc.tokens, cfg.hidden, cfg.intermediate
    prefill = sc.kind == "prefill"
    attn = AttentionPart("attention-prefill" if prefill else "attention-decode",
                         f"1,{cfg.heads},{cfg.kv_heads},{cfg.head_dim},{sc.kv_len}")
    return {
        "norm1": RowPart("rmsnorm", t, h),
        "qkv": GemmPart(t, cfg.qkv_width, h),
        "rope": RopePart(t, cfg.heads, cfg.kv_heads, cfg.head_dim),
        "attn": attn,
        "relayout": StreamPart(2 * t * cfg.q_width * E) if prefill else StreamPart(0),
        "oproj": GemmPart(t, h, cfg.q_width),
        "oproj_add": GemmPart(t, h, cfg.q_width, ADD),
        "add1": EwPart(ADD, t, h),
        "norm2": RowPart("rmsnorm", t, h),
        "addnorm2": RowPart("rmsnorm-residual", t, h),
        "gateup": GemmPart(t, 2 * i, h),
        "gateup_glu": GemmPart(t, 2 * i, h, "glu(act=silu)"),
        "silu_mul": EwPart(SILU_MUL, t, i),
        "down": GemmPart(t, h, i),
        "down_add": GemmPart(t, h, i, ADD),
        "add2": EwPart(ADD, t, h),
    }


def rope_part_specs(specs: Mapping[str, Any]) -> dict[str, Any]:
    """The part of the template's option rope_fusion (ROPE_PARTS), from `part_specs`' attention and rope parts:
    decode attention with the rope inside."""
    attn = specs["attn"]
    return {"attn_rope": AttentionPart(attn.template, attn.shape, specs["rope"])}


def rope_inside(attn: PartPlan, decode: bool) -> PartPlan:
    """attn_rope's plan: attention's design and model time plus ROPE_INSIDE_PRIOR_US (model prior); infeasible
    (time 0, detail["feasible"] False) for a prefill."""
    if not decode:
        return PartPlan("attn_rope", "attention", 0.0, {}, {"feasible": False, "why": "decode attention only"})
    return PartPlan("attn_rope", "attention", attn.time_us + ROPE_INSIDE_PRIOR_US, dict(attn.design),
                    {**attn.detail, "feasible": True, "rope_inside_us": ROPE_INSIDE_PRIOR_US,
                     "rope_inside_source": "model prior (qwen3_layer_template.ROPE_INSIDE_PRIOR_US)"})


def norm_part_specs(cfg: Qwen3Config, sc: Scenario) -> dict[str, Any]:
    """The norm-fused GEMM parts of the template's option norm_fusion (NORM_PARTS)."""
    t, h, i = sc.tokens, cfg.hidden, cfg.intermediate
    return {"qkv_norm": GemmPart(t, cfg.qkv_width, h, norm=True), "gateup_norm": GemmPart(t, 2 * i, h, norm=True),
            "gateup_glu_norm": GemmPart(t, 2 * i, h, "glu(act=silu)", norm=True)}


@dataclass
class PartPlan:
    name: str
    kind: str          # gemm, attention, stream
    time_us: float     # the part's model
    design: dict = field(default_factory=dict)
    detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"part": self.name, "kind": self.kind, "model_us": self.time_us, "design": self.design,
                "detail": self.detail, "what": {**PARTS, **NORM_PARTS, **ROPE_PARTS}[self.name]}


def _solve_gemm(name: str, spec: GemmPart, chip, gemm_calibration: Mapping[str, float] | None,
                gemv_calibration: Mapping[str, float] | None = None) -> PartPlan:
    """The faster (model) of the tensor-core family's MILP pick and, for a few rows (decode), the
    CUDA-core GEMV family's; the other's model time is kept in the detail. A norm-fused part (`norm`)
    is the GEMV family's with a_norm, infeasible (time 0, detail["feasible"] False) beyond its rows."""
    if spec.norm:
        return _solve_norm_gemv(name, spec, chip, gemv_calibration)
    t = get_template(GEMM_TEMPLATE, dtype="bf16", epilogue=spec.chain, calibration=gemm_calibration,
                     calibration_id="given" if gemm_calibration else "priors")
    wl = gemm_epilogue.workload(spec.M, spec.N, spec.K, "bf16", pb_=spec.K)
    s = solve_milp(t.formulate(wl, chip))
    detail = {"M": spec.M, "N": spec.N, "K": spec.K, "chain": spec.chain, "template": GEMM_TEMPLATE,
              "solver": s.solver}
    best = PartPlan(name, "gemm", float(s.objective), {k: int(v) for k, v in s.assignment.items()}, detail)
    if spec.M <= gemv_epilogue.MAX_ROWS:
        gemv = _gemv_plan(name, spec, chip, gemv_calibration, detail)
        by = {GEMM_TEMPLATE: best.time_us, gemv_epilogue.NAME: gemv.time_us}
        detail["model_us_by_template"] = gemv.detail["model_us_by_template"] = by
        if gemv.time_us < best.time_us:
            best = gemv
    return best


def _gemv_plan(name: str, spec: GemmPart, chip, calibration: Mapping[str, float] | None, detail: dict) -> PartPlan:
    """gemv-epilogue-gpu's MILP pick for the part (with a_norm where the part fuses the norm)."""
    t = get_template(gemv_epilogue.NAME, dtype="bf16", epilogue=spec.chain, calibration=calibration,
                     calibration_id="given" if calibration else "priors", a_norm=spec.norm)
    s = solve_milp(t.formulate(gemv_epilogue.workload(spec.M, spec.N, spec.K), chip))
    return PartPlan(name, "gemm", float(s.objective), gemv_epilogue.design_config(s.assignment),
                    {**detail, "template": gemv_epilogue.NAME, "solver": s.solver})


def _solve_norm_gemv(name: str, spec: GemmPart, chip, calibration: Mapping[str, float] | None) -> PartPlan:
    detail = {"M": spec.M, "N": spec.N, "K": spec.K, "chain": spec.chain, "norm": True,
              "template": gemv_epilogue.NAME, "feasible": spec.M <= gemv_epilogue.MAX_ROWS}
    if not detail["feasible"]:
        return PartPlan(name, "gemm", 0.0, {}, {**detail, "why": f"M > {gemv_epilogue.MAX_ROWS}: no norm-fused GEMV"})
    return _gemv_plan(name, spec, chip, calibration, detail)


def _solve_part(name: str, spec, chip_name: str, gemm_calibration: Mapping[str, float] | None = None,
                gemv_calibration: Mapping[str, float] | None = None,
                attention_calibration: Mapping[str, Mapping[str, float]] | None = None) -> PartPlan:
    chip = get_chip(chip_name)
    if isinstance(spec, GemmPart):
        return _solve_gemm(name, spec, chip, gemm_calibration, gemv_calibration)
    if isinstance(spec, AttentionPart):
        r = attention_service.solve(spec.template, spec.shape, chip=chip_name,
                                    calibration=(attention_calibration or {}).get(spec.template))
        return PartPlan(name, "attention", float(r["objective_us"]), dict(r["design"]),
                        {"template": spec.template, "shape": spec.shape, "solver": r["solver"],
                         "calibration": r["calibration"]})
    if isinstance(spec, (RowPart, EwPart, RopePart)):
        if isinstance(spec, RowPart):
            tname, t, wl = f"rowwise-{spec.op}", get_template(f"rowwise-{spec.op}", dtype="bf16"), \
                rowwise.workload(spec.R, spec.C)
        elif isinstance(spec, EwPart):
            tname, t, wl = "elementwise", get_template("elementwise", chain=spec.chain, dtype="bf16"), \
                elementwise.workload(spec.M, spec.N)
        else:
            tname, t = ROPE_TEMPLATE, get_template(ROPE_TEMPLATE, dtype="bf16")
            wl = {"T": spec.T, "Hq": spec.Hq, "Hkv": spec.Hkv, "D": spec.D, "e": E}
        s = solve_milp(t.formulate(wl, chip))
        return PartPlan(name, "vector", float(s.objective), {k: int(v) for k, v in s.assignment.items()},
                        {"template": tname, **{k: v for k, v in vars(spec).items()}, "solver": s.solver})
    return PartPlan(name, "stream", stream_us(spec.bytes, chip) if spec.bytes else 0.0, {"BT": 32},
                    {"bytes": spec.bytes, "model": "launch + bytes / (eta_bw * bw)", "template": "(own copy kernel)"})


def solve_parts(cfg: Qwen3Config, sc: Scenario, chip: str = "h200", workers: int = 4) -> dict[str, PartPlan]:
    """Each part's design and model time (the GEMMs and attention solved by their templates)."""
    return plan_many(cfg, [sc], chip, workers=workers)[0].parts


def solve_layer(parts: Mapping[str, PartPlan], model: str = "qwen3-8b", t_pdl: float = T_PDL_PRIOR,
                norm_fusion: bool = False, rope_fusion: bool = False) -> dict:
    """The fusion choice (HiGHS over qwen3-layer), with every choice's cost by enumeration; `t_pdl` the
    saving per PDL hand-over (us, the template's prior unless measured); `norm_fusion`, `rope_fusion`: the
    template's options (NF, RA), their parts in `parts`."""
    t = get_template(NAME, model=model, norm_fusion=norm_fusion, rope_fusion=rope_fusion)
    prefill = parts["attn"].detail.get("template") == "attention-prefill"
    known = {**PARTS, **(NORM_PARTS if norm_fusion else {}), **(ROPE_PARTS if rope_fusion else {})}
    values = {f"t_{n}": p.time_us for n, p in parts.items() if n in known}
    nf_ok = norm_fusion and all(parts[n].detail.get("feasible") for n in NORM_PARTS)
    ra_ok = rope_fusion and all(parts[n].detail.get("feasible") for n in ROPE_PARTS)
    f = t.formulate({**values, "t_pdl": t_pdl, "n_pdl_fixed": PDL_FIXED[prefill],
                     **({"nf_ok": int(nf_ok)} if norm_fusion else {}),
                     **({"ra_ok": int(ra_ok)} if rope_fusion else {})})
    s = solve_milp(f)
    e = enumerate_designs(f)
    costs = []
    for fu in all_fusions((1, 0), (1, 0) if nf_ok else (0,), (1, 0) if ra_ok else (0,)):
        v = t.evaluate_terms({**fu.as_dict(), **({"NF": fu.NF} if norm_fusion else {}),
                              **({"RA": fu.RA} if rope_fusion else {})}, f.params)["cost"]
        costs.append({"fusion": fu.as_dict(), "model_us": v})
    costs.sort(key=lambda r: r["model_us"])
    return {"fusion": Fusion.of(s.assignment).as_dict(), "model_us": float(s.objective), "bound_us": float(s.bound),
            "solver": s.solver, "status": s.status.value, "enumerated_us": float(e.objective),
            "ties": len(e.ties) if e.ties is not None else None, "choices": costs, "t_pdl_us": t_pdl,
            "template": NAME, "template_hash": t.content_hash, "norm_fusion": bool(norm_fusion),
            **({"rope_fusion": True} if rope_fusion else {})}


@dataclass
class LayerPlan:
    """One scenario's plan: the fusion, every part's plan, the layer's model time."""

    cfg: Qwen3Config
    scenario: Scenario
    fusion: Fusion
    parts: dict[str, PartPlan]
    layer: dict

    @property
    def launched(self) -> tuple[str, ...]:
        return self.fusion.parts(self.scenario.kind == "prefill")

    @property
    def model_us(self) -> float:
        """The parts' model times, less the PDL saving with PD = 1 (us, model)."""
        saving = self.layer.get("t_pdl_us", T_PDL_PRIOR) * self.fusion.handovers(self.scenario.kind == "prefill") \
            if self.fusion.PD else 0.0
        return sum(self.parts[p].time_us for p in self.launched) - saving

    def with_fusion(self, fusion: Fusion) -> "LayerPlan":
        return LayerPlan(self.cfg, self.scenario, fusion, self.parts, self.layer)

    def as_dict(self) -> dict:
        return {"scenario": self.scenario.text, "fusion": self.fusion.as_dict(), "model_us": self.model_us,
                "parts": [self.parts[p].as_dict() for p in self.launched], "layer_solve": self.layer,
                "units": {"model_us": "us (model)", "parts.model_us": "us (model)"}}


def plan(cfg: Qwen3Config, sc: Scenario, chip: str = "h200", model: str = "qwen3-8b", workers: int = 4,
         gemm_calibration: Mapping[str, float] | None = None,
         gemv_calibration: Mapping[str, float] | None = None, norm_fusion: bool = False,
         rope_fusion: bool = False) -> LayerPlan:
    return plan_many(cfg, [sc], chip, model, workers, gemm_calibration, gemv_calibration, norm_fusion,
                     rope_fusion=rope_fusion)[0]


def plan_many(cfg: Qwen3Config, scenarios, chip: str = "h200", model: str = "qwen3-8b",
              workers: int = 4, gemm_calibration: Mapping[str, float] | None = None,
              gemv_calibration: Mapping[str, float] | None = None, norm_fusion: bool = False,
              attention_calibration: Mapping[str, Mapping[str, float]] | None = None,
              rope_fusion: bool = False) -> list[LayerPlan]:
    """Plans for several scenarios, every part solve of every scenario in one process pool. The GEMM
    parts use `gemm_calibration` (fitted terms of the gemm-epilogue template) and `gemv_calibration`
    (gemv-epilogue's) when given, else priors; attention the fitted terms `attention_calibration` names for its
    template (attention-decode, attention-prefill), else priors; `norm_fusion`: the layer template's NF option (the
    norm-fused decode GEMVs solved too); `rope_fusion`: its RA option (decode attention with the rope inside)."""
    cfg = check_config(cfg)
    specs = [{**part_specs(cfg, sc), **(norm_part_specs(cfg, sc) if norm_fusion else {})} for sc in scenarios]
    # one solve per distinct part (decode's GEMM parts are the same at every history length)
    jobs = list(dict.fromkeys((n, s) for sp in specs for n, s in sp.items()))
    if workers <= 1:
        solved = {(n, s): _solve_part(n, s, chip, gemm_calibration, gemv_calibration, attention_calibration)
                  for n, s in jobs}
    else:
        # processes: the solves are CPU work in Python and HiGHS; spawn keeps CUDA state out of them
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            done = {(n, s): pool.submit(_solve_part, n, s, chip, gemm_calibration, gemv_calibration,
                                        attention_calibration) for n, s in jobs}
            solved = {k: f.result() for k, f in done.items()}
    out = []
    for i, sc in enumerate(scenarios):
        parts = {n: copy.deepcopy(solved[(n, s)]) for n, s in specs[i].items()}
        if rope_fusion:
            parts["attn_rope"] = rope_inside(parts["attn"], sc.kind == "decode")
        layer = solve_layer(parts, model, norm_fusion=norm_fusion, rope_fusion=rope_fusion)
        out.append(LayerPlan(cfg, sc, Fusion(**layer["fusion"]), parts, layer))
    return out


def _gemm_bytes(p: GemmPart) -> int:
    n_out = p.N // 2 if "glu" in p.chain else p.N
    return E * (p.M * p.K + p.N * p.K + p.M * n_out * (2 if "add" in p.chain else 1) + (p.K if p.norm else 0))


def part_sol(spec, chip) -> tuple[float, float]:
    """(FLOPs, minimum DRAM bytes) of one part: operands read once, results written once."""
    if isinstance(spec, GemmPart):
        return 2.0 * spec.M * spec.N * spec.K, float(_gemm_bytes(spec))
    if isinstance(spec, AttentionPart):
        r = attention_service.sol(spec.template, spec.shape, chip=chip.name)
        # rope inside: its bytes but the rotated q's store and load (it stays in registers)
        rope = part_sol(spec.rope, chip)[1] - 2 * E * spec.rope.T * spec.rope.Hq * spec.rope.D if spec.rope else 0.0
        return float(r["flops"]), float(r["bytes"]) + rope
    if isinstance(spec, RowPart):
        return 0.0, float(E * ((4 if spec.op == "rmsnorm-residual" else 2) * spec.R * spec.C + spec.C))
    if isinstance(spec, EwPart):
        return 0.0, float(3 * E * spec.M * spec.N)
    if isinstance(spec, RopePart):
        return 0.0, float(spec.T * spec.D * E * (2 * spec.Hq + 4 * spec.Hkv) + spec.T * spec.D * 4)
    return 0.0, float(spec.bytes)


def floor_us(flops: float, bytes_: float, chip) -> float:
    return max(flops / chip.peak("bf16"), bytes_ / chip.bandwidth) * 1e6


def part_floor_us(plan: "LayerPlan", name: str, chip) -> float:
    """The speed-of-light floor of one part (us, sol)."""
    specs = {**part_specs(plan.cfg, plan.scenario), **norm_part_specs(plan.cfg, plan.scenario)}
    specs.update(rope_part_specs(specs))
    return floor_us(*part_sol(specs[name], chip), chip)


def layer_floor(cfg: Qwen3Config, sc: Scenario, chip_name: str = "h200") -> dict:
    """The layer's floor (us, sol): every weight and the KV history read once, x read, out and the
    new K/V written once (memory), against every GEMM's and attention's FLOPs (compute)."""
    chip = get_chip(chip_name)
    specs = part_specs(cfg, sc)
    flops = sum(part_sol(specs[n], chip)[0] for n in ("qkv", "attn", "oproj", "gateup", "down"))
    weights = E * (cfg.qkv_width * cfg.hidden + cfg.hidden * cfg.q_width + 3 * cfg.intermediate * cfg.hidden
                   + 2 * cfg.hidden + 2 * cfg.head_dim)
    kv = E * 2 * cfg.kv_heads * cfg.head_dim * sc.kv_len
    bytes_ = weights + kv + 2 * E * sc.tokens * cfg.hidden
    return {"floor_us": floor_us(flops, bytes_, chip), "memory_us": bytes_ / chip.bandwidth * 1e6,
            "compute_us": flops / chip.peak("bf16") * 1e6, "bytes": bytes_, "flops": flops, "source": "sol",
            "bandwidth_tb_s": chip.bandwidth / 1e12}
