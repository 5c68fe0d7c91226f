"""Per-head RMSNorm of q and k, rotary embedding and the KV-cache write, fused ("qk-norm-rope-kv"): the
Qwen3 attention prologue between the QKV projection and attention, one launch.

For each token t and head h: q_out[t, h] = rope(rmsnorm(q[t, h]) · q_weight, pos[t]); for each KV head:
k_cache[slot[t], h] = rope(rmsnorm(k[t, h]) · k_weight, pos[t]) and v_cache[slot[t], h] = v[t, h]. RMSNorm
over the head dim D (eps), RoPE in the neox/HF form (rotate_half: the first and second halves of D
pair up) with fp32 cos/sin tables of HF's construction (theta). The program is launched over (token,
head pack): HP consecutive heads of the list [q heads..., k heads...] per program.

Decisions: HP heads per program (power of two), W warps.
Walls: C1 the fp32 head tiles (two halves, their weight and cos/sin) fit `regs` per thread; C2 no idle
lane; C3 a pack no larger than the head list's power of two.
Cost (µs, memory-bound): t_launch + (1−alpha)·max(T_mem, T_comp) + alpha·(T_mem + T_comp); T_mem the SOL
bytes (q, k, v read, q_out and the cache rows written, cos/sin per token) at min(bw·eta_bw, programs in
flight / latency); T_comp waves × (t_start + t_elem · elements per thread)."""
from __future__ import annotations

import functools
from collections.abc import Mapping

from formloop.dtypes import dtype_bytes
from formloop.errors import InvalidInput
from formloop.expr import ceildiv, decision, floordiv, maximum, minimum, param
from formloop.hw.chips import get_chip
from formloop.library import register_template
from formloop.library import rowwise as rw
from formloop.library.gemm_tiling_gpu import proof_chip
from formloop.solve import solve_milp
from formloop.template import Constraint, Template
from formloop.verify.certificate import ProofPlan
from formloop.verify.index import IndexAxis

NAME = "qk-norm-rope-kv"
HEAD_DIMS = (32, 64, 128, 256)
DTYPES = ("bf16", "fp16", "fp32")
LIVE = 4  # fp32 values per element held: the two halves, the weight, cos/sin
US = 1e6

HP = decision("HP", (1, 2, 4, 8, 16, 32, 64), doc="heads per program (of the list q heads, then k heads)")
W = decision("W", (4, 1, 2, 8, 16), doc="warps per program (num_warps)")
T = param("T", doc="tokens")
Hq = param("Hq", doc="query heads")
Hkv = param("Hkv", doc="key/value heads")
D = param("D", doc="head dimension")
e = param("e", doc="bytes per element of q, k, v and the cache")
warps_sm, regs, regs_sm, n_sm, bw = rw.warps_sm, rw.regs, rw.regs_sm, rw.n_sm, rw.bw
eta_bw, lat_m, t_elem, t_start, t_launch, alpha = rw.eta_bw, rw.lat_m, rw.t_elem, rw.t_start, rw.t_launch, rw.alpha
CHIP_PARAMS = (warps_sm, regs, regs_sm, n_sm, bw, eta_bw, lat_m, t_elem, t_start, t_launch, alpha)


def sol_bytes(tokens, hq, hkv, d, elem):
    """q, k, v read; q_out, k and v cache rows written; cos and sin (fp32, D/2 each) per token."""
    return tokens * d * elem * (2 * hq + 4 * hkv) + tokens * d * 4


heads = Hq + Hkv
programs = T * ceildiv(heads, HP)
threads = 32 * W
per_thread = ceildiv(HP * D, threads)
_, active, waves = rw.resident(programs, W, LIVE * per_thread + 32)
bytes_ = sol_bytes(T, Hq, Hkv, D, e)
T_mem = bytes_ / minimum(bw * eta_bw, active * HP * D * e * 2 / lat_m) * US
T_comp = waves * (t_start + lat_m + t_elem * per_thread * 3) * US
COST = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + t_launch * US


@register_template(NAME)
def qk_norm_rope_kv(dtype: str = "bf16", calibration: Mapping[str, float] | None = None,
                    calibration_id: str = "priors", pre: str = "exact") -> Template:
    """The fused q/k RMSNorm + RoPE + KV-cache write for inputs of `dtype`."""
    if dtype not in DTYPES:
        raise InvalidInput("dtype", dtype, DTYPES)
    if pre != "exact":
        raise InvalidInput("contract (--pre)", pre, ["exact"])
    return Template(
        name=NAME,
        doc=__doc__.strip().splitlines()[0],
        decisions=(HP, W),
        params=(T, Hq, Hkv, D, e, *CHIP_PARAMS),
        scope=(Constraint("rates_positive", bw > 0, "scope", "the chip moves bytes"),
               Constraint("head_dim", D.eq(32) | D.eq(64) | D.eq(128) | D.eq(256), "scope",
                          f"the head dimension is one of {HEAD_DIMS}")),
        constraints=(
            Constraint("C1", LIVE * per_thread <= regs, "capacity", "the head tiles fit the registers"),
            Constraint("C2", HP * D > 32 * (W - 1), "capacity", "every warp holds at least one element"),
            Constraint("C3", (HP < 2 * heads) | HP.eq(1), "layout", "no larger than the head list's power of two"),
        ),
        preconditions=(Constraint("cover", HP * ceildiv(heads, HP) >= heads, "layout", "the packs cover the heads"),),
        cost=COST,
        unit="us",
        terms={"T_mem_us": T_mem, "T_comp_us": T_comp, "sol_bytes": bytes_, "programs": programs,
               "per_thread": per_thread},
        tie_break=("T_comp_us", "per_thread"),
        bind_chip=lambda chip: {k: v for k, v in rw.chip_params(chip, calibration).items()
                                if k in {p.name for p in CHIP_PARAMS}},
        program=lambda assignment, wl: program(assignment, dtype),
        obligations=lambda template: proof_plan(template, dtype),
        options={"dtype": dtype, "calibration": calibration_id},
        descriptor={"algorithm": NAME, "reuse": "none (streaming)", "placement": "one program per token x head pack",
                    "resources": ("registers",), "program": "triton", "shape": "T,Hq,Hkv,D",
                    "chip": proof_chip().name},
    )


def workload(tokens: int, hq: int, hkv: int, d: int, dtype: str = "bf16") -> dict[str, int]:
    if d not in HEAD_DIMS:
        raise InvalidInput("head dim", d, HEAD_DIMS)
    return {"T": int(tokens), "Hq": int(hq), "Hkv": int(hkv), "D": int(d), "e": dtype_bytes(dtype)}


def program(assignment: Mapping[str, int], dtype: str):
    from formloop.library.qk_rope_kernel import QkRopeConfig, QkRopeProgram  # noqa: PLC0415 (triton, torch)

    return QkRopeProgram(QkRopeConfig.from_assignment(assignment), dtype)


def check_rope_tables(cos, sin, d: int, rows: int = 1) -> None:
    """cos, sin: fp32 tensors [P, d/2] with P >= `rows`, contiguous along d/2, one row stride for both (HF's tables,
    qk_rope_kernel.rope_tables); else the named error. Both kernels that read them (the rope kernel, decode
    attention with the rope inside) check them here."""
    import torch  # noqa: PLC0415 (the template module loads without torch)

    for name, tab in (("cos", cos), ("sin", sin)):
        if tab.dtype != torch.float32 or tab.dim() != 2 or tab.shape[1] != d // 2 or tab.stride(1) != 1:
            raise InvalidInput(f"{name} table", (str(tab.dtype), tuple(tab.shape)), f"fp32 [P, {d // 2}]")
        if tab.shape[0] < rows:
            raise InvalidInput(f"{name} table rows", tab.shape[0], f">= {rows} (a row per position read)")
    if cos.stride(0) != sin.stride(0):
        raise InvalidInput("sin stride", sin.stride(0), [cos.stride(0)])


@functools.lru_cache(maxsize=256)
def solved_design(tokens: int, hq: int, hkv: int, d: int, dtype: str = "bf16", chip: str = "h200") -> dict[str, int]:
    t = qk_norm_rope_kv(dtype)
    sol = solve_milp(t.formulate(workload(tokens, hq, hkv, d, dtype), get_chip(chip)))
    return {k: int(v) for k, v in sol.assignment.items()}


def proof_plan(template: Template, dtype: str) -> ProofPlan:
    """Coverage, exact-once and no-phantom of the head packs over Hq + Hkv heads (every HP)."""
    n, h = param("H", doc="heads (Hq + Hkv)"), param("h", lower=None)
    axis = IndexAxis("H", n, HP, ceildiv(n, HP), HP, h < n, floordiv(h, HP), h)
    return rw.index_proof_plan(template, rw.chip_params(proof_chip()), ((axis, HP),),
                               "the walls read the proof chip's registers and warps; T, Hq, Hkv, D symbolic",
                               e=dtype_bytes(dtype))
