"""The Qwen3 decoder layer as a template ("qwen3-layer"): which neighbouring operations fuse, priced
by the parts' own cost models and solved by MILP.

Decisions (each a fusion of two neighbouring operations into one kernel):
  R1  residual add after attention: 1 = in the O-projection's epilogue (add(residual)), 2 = fused
      into the post-attention RMSNorm (one kernel adds, stores the sum and normalizes it), 0 = its
      own kernel
  GL  SiLU·mul: 1 = in the GateUp GEMM's epilogue (glu(silu) over interleaved gate/up columns; the
      GEMM writes half its width), 0 = GateUp writes gate and up, a kernel multiplies
  R2  residual add after the MLP: 1 = in the Down projection's epilogue, 0 = its own kernel
  PD  programmatic dependent launch (formloop.library.pdl): 1 = the norms, the GEMMs, the rope kernel
      and decode attention are launched as programmatic dependents (each may be scheduled while the
      kernel before it finishes, weights prefetched into the L2 before its wait), 0 = plain launches
  NF  (option norm_fusion) the input and post-attention RMSNorms: 1 = inside the QKV and GateUp GEMVs'
      loops (gemv-epilogue-gpu with a_norm; decode only, nf_ok = 1, and not with R1 = 2, whose kernel is
      the norm), 0 = their own kernels. Without the option the template is the one before NF existed.
  RA  (option rope_fusion) the q/k RMSNorm + RoPE + KV-cache write: 1 = inside decode attention (part
      attn_rope: attention-decode with `rope`, its q read raw from the QKV output, the new key and value
      normalized, rotated and written by the split that holds them; decode only, ra_ok = 1), 0 = its own
      kernel. Its time is attention's plus t_rope_inside (model prior ROPE_INSIDE_PRIOR_US).
Fixed parts: the input RMSNorm, the QKV GEMM, the q/k RMSNorm + RoPE fused with the KV-cache write,
attention (attention-prefill or attention-decode), and for prefill the relayout of the attention
output from head-major to token-major rows (the prefill kernel stores [heads, tokens, head_dim]).

Parameters: every part's time in us (workload parameters, >= 0), bound from the parts' models by
`part_times`: the GEMMs solved as gemm-epilogue-gpu with their chains (HiGHS), attention solved by
its template, the row-wise and element-wise parts as a stream (launch + bytes / (eta_bw · bw), the
GEMM template's priors for both). Cost: the sum of the parts the choice launches (one stream, one
kernel at a time, so times add), less, with PD = 1, t_pdl for every hand-over between two
programmatic-dependent kernels (the next one's launch and ramp overlap the previous one's tail; a
plainly launched kernel -- the element-wise adds, SiLU·mul, the relayout, prefill attention -- breaks
the overlap on both of its sides). Every branch starts with a PDL kernel, so the count is a sum per
decision: n_pdl_fixed (4 in decode: norm1 -> qkv -> rope -> attention -> O-proj; 2 in prefill) plus
PDL_HANDOVERS below, the last counting the hand-over to the next layer's norm. t_pdl's prior (0.5 us)
is conservative: an in-graph launch gap on the H200 is 1-3 us; the benchmark's A/B measures it.

Obligations: every fusion choice computes the layer, with PD on and off. It is checked, not proved:
qwen3_layer_check runs each choice's kernels (Triton interpreter without a GPU) at the tiny config on
prefill and decode and compares output and KV cache with the fp32 reference. And every kernel the
layer launches as a programmatic dependent keeps pdl.py's rules (no store, no read of a buffer an
earlier kernel writes, before an unconditional wait): qwen3_layer_pdl checks its source (here) and,
on a GPU, its compiled PTX (pdl_check)."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from formloop.expr import decision, param, where
from formloop.library import register_template
from formloop.library.gemm_tiling_gpu import PRIORS
from formloop.library.qwen3_layer_pdl import check_sources
from formloop.template import Constraint, Template, bool_option
from formloop.verify.certificate import ProofPlan
from formloop.verify.outcome import ObligationResult, Verdict

NAME = "qwen3-layer"
R1 = decision("R1", (1, 2, 0), doc="residual add after attention: 1 O-proj epilogue, 2 into the RMSNorm, 0 a kernel")
GL = decision("GL", (1, 0), doc="SiLU·mul: 1 in the GateUp epilogue (glu), 0 its own kernel")
R2 = decision("R2", (1, 0), doc="residual add after the MLP: 1 in the Down epilogue, 0 its own kernel")
PD = decision("PD", (1, 0), doc="programmatic dependent launch of the chain: 1 on, 0 plain launches")
NF = decision("NF", (1, 0), doc="the RMSNorms before QKV and GateUp: 1 in the GEMVs' loops (decode), 0 own kernels")
RA = decision("RA", (1, 0), doc="q/k norm + RoPE + KV write: 1 inside decode attention, 0 its own kernel")
DECISIONS = (R1, GL, R2, PD)
# hand-overs between two PDL kernels per branch value (R1 = 0: O-proj -> add1 and add1 -> norm2 are plain)
PDL_HANDOVERS = {"R1": {1: 2, 2: 2, 0: 1}, "GL": {1: 1, 0: 0}, "R2": {1: 1, 0: 0}}
T_PDL_PRIOR = 0.5  # us per hand-over (model prior)
PDL_FIXED = {False: 4, True: 2}  # hand-overs among the fixed parts: decode, prefill (attention, relayout plain)

PARTS = {
    "norm1": "RMSNorm of the layer input",
    "qkv": "QKV projection (GEMM)",
    "rope": "q/k RMSNorm + RoPE fused with the KV-cache write",
    "attn": "attention (template attention-prefill or attention-decode)",
    "relayout": "attention output head-major -> token-major (prefill only)",
    "oproj": "O projection (GEMM)",
    "oproj_add": "O projection with the residual add in its epilogue",
    "add1": "residual add after attention (own kernel)",
    "norm2": "post-attention RMSNorm",
    "addnorm2": "residual add fused into the post-attention RMSNorm",
    "gateup": "GateUp projection writing gate and up (GEMM)",
    "gateup_glu": "GateUp projection with SiLU·mul in its epilogue",
    "silu_mul": "SiLU(gate)·up (own kernel)",
    "down": "Down projection (GEMM)",
    "down_add": "Down projection with the residual add in its epilogue",
    "add2": "residual add after the MLP (own kernel)",
}
ROPE_PARTS = {"attn_rope": "decode attention with the q/k RMSNorm + RoPE + KV-cache write inside (one kernel)"}
ROPE_INSIDE_PRIOR_US = 0.5  # us (model prior) the rope work adds to attention: q normalized per program, the new key
NORM_PARTS = {
    "qkv_norm": "QKV projection with the input RMSNorm in its loop (GEMV, a_norm)",
    "gateup_norm": "GateUp projection writing gate and up, the post-attention RMSNorm in its loop (GEMV, a_norm)",
    "gateup_glu_norm": "GateUp with SiLU·mul in its epilogue, the post-attention RMSNorm in its loop (GEMV, a_norm)",
}
T = {name: param(f"t_{name}", integer=False, lower=0, doc=f"{doc}, us (its model)")
     for name, doc in {**PARTS, **NORM_PARTS, **ROPE_PARTS}.items()}
RA_OK = param("ra_ok", integer=True, lower=0, doc="1 where attention takes the rope inside (decode), else 0")
NF_OK = param("nf_ok", integer=True, lower=0, doc="1 where the norm-fused GEMVs exist (decode: M <= 8), else 0")
T_PDL = param("t_pdl", integer=False, lower=None, doc="saving per hand-over between two PDL kernels, us (prior "
              f"{T_PDL_PRIOR}; negative if measured slower)")
N_PDL_FIXED = param("n_pdl_fixed", integer=True, lower=0, doc="hand-overs among the fixed parts (decode 4, prefill 2)")

ATTN_BRANCH = {1: ("oproj_add", "norm2"), 2: ("oproj", "addnorm2"), 0: ("oproj", "add1", "norm2")}
MLP_BRANCH = {1: ("gateup_glu",), 0: ("gateup", "silu_mul")}
# NF = 1: the norms run inside the GEMVs (R1 = 2 excluded: its kernel is the norm)
ATTN_BRANCH_NF = {1: ("oproj_add",), 2: ("oproj", "addnorm2"), 0: ("oproj", "add1")}
MLP_BRANCH_NF = {1: ("gateup_glu_norm",), 0: ("gateup_norm", "silu_mul")}
FIXED_NF = ("qkv_norm", "rope", "attn", "relayout")
NF_HANDOVERS = 2  # norm1 -> QKV and norm2 -> GateUp
RA_HANDOVERS = 1  # rope -> attention
OUT_BRANCH = {1: ("down_add",), 0: ("down", "add2")}
FIXED = ("norm1", "qkv", "rope", "attn", "relayout")


@dataclass(frozen=True)
class Fusion:
    """One fusion choice (values of R1, GL, R2)."""

    R1: int = 1
    GL: int = 1
    R2: int = 1
    PD: int = 0
    NF: int = 0
    RA: int = 0

    @classmethod
    def of(cls, assignment: Mapping[str, int]) -> "Fusion":
        return cls(int(assignment["R1"]), int(assignment["GL"]), int(assignment["R2"]), int(assignment.get("PD", 0)),
                   int(assignment.get("NF", 0)), int(assignment.get("RA", 0)))

    def parts(self, prefill: bool = True) -> tuple[str, ...]:
        """The parts this choice launches, in order (the relayout only after a prefill)."""
        if self.NF:
            out = FIXED_NF[: 4 if prefill else 3] + ATTN_BRANCH_NF[self.R1] + MLP_BRANCH_NF[self.GL] \
                + OUT_BRANCH[self.R2]
        else:
            out = FIXED[: 5 if prefill else 4] + ATTN_BRANCH[self.R1] + MLP_BRANCH[self.GL] + OUT_BRANCH[self.R2]
        if self.RA:  # the rope kernel's work runs inside attention
            out = tuple("attn_rope" if p == "attn" else p for p in out if p != "rope")
        return out

    def as_dict(self) -> dict[str, int]:
        """R1, GL, R2, PD (and NF, RA where 1: the choices without them read as before they existed)."""
        return {"R1": self.R1, "GL": self.GL, "R2": self.R2, "PD": self.PD, **({"NF": 1} if self.NF else {}),
                **({"RA": 1} if self.RA else {})}

    def with_pdl(self, on: bool) -> "Fusion":
        return Fusion(self.R1, self.GL, self.R2, int(bool(on)), self.NF, self.RA)

    def handovers(self, prefill: bool) -> int:
        """Hand-overs between two PDL kernels in one layer (and to the next layer's norm) with PD = 1."""
        h = PDL_HANDOVERS
        return (PDL_FIXED[bool(prefill)] + h["R1"][self.R1] + h["GL"][self.GL] + h["R2"][self.R2]
                - (NF_HANDOVERS if self.NF else 0) - (RA_HANDOVERS if self.RA else 0))

    @property
    def text(self) -> str:
        return (f"R1={self.R1},GL={self.GL},R2={self.R2},PD={self.PD}" + (",NF=1" if self.NF else "")
                + (",RA=1" if self.RA else ""))


def all_fusions(pdl: tuple[int, ...] = (0,), nf: tuple[int, ...] = (0,), ra: tuple[int, ...] = (0,)) -> list[Fusion]:
    """Every fusion choice (with each PD value in `pdl`, each NF value in `nf` and each RA value in `ra`; NF = 1
    excludes R1 = 2)."""
    return [Fusion(a, b, c, d, n, r) for a, b, c, d, n, r in itertools.product(
        R1.decision.menu, GL.decision.menu, R2.decision.menu, pdl, nf, ra) if not (n and a == 2)]


def _branch(d, table: Mapping[int, tuple[str, ...]]):
    """The time of the parts the decision's value selects, as a where() chain over its menu."""
    values = list(table)
    expr = sum((T[p] for p in table[values[-1]]), start=0.0)
    for v in reversed(values[:-1]):
        expr = where(d.eq(v), sum((T[p] for p in table[v]), start=0.0), expr)
    return expr


def _count(d, table: Mapping[int, int]):
    """The count the decision's value selects, as a where() chain over its menu."""
    values = list(table)
    expr = table[values[-1]]
    for v in reversed(values[:-1]):
        expr = where(d.eq(v), table[v], expr)
    return expr


def stream_us(bytes_: float, chip, calibration: Mapping[str, float] | None = None) -> float:
    """A row-wise or element-wise kernel: one launch plus its DRAM bytes at the GEMM template's
    achieved copy fraction (us, model)."""
    p = {**PRIORS, **(calibration or {})}
    return (p["t_launch"] + bytes_ / (p["eta_bw"] * chip.bandwidth)) * 1e6


@register_template(NAME)
def qwen3_layer(model: str = "qwen3-8b", norm_fusion: bool = False, rope_fusion: bool = False) -> Template:
    """The layer's fusion template (the model only names the option; shapes enter through times);
    `norm_fusion` adds the decision NF (the norms inside the decode GEMVs), `rope_fusion` the decision RA
    (the q/k norm + RoPE + KV write inside decode attention)."""
    norm_fusion = bool_option("option norm_fusion", norm_fusion)
    rope_fusion = bool_option("option rope_fusion", rope_fusion)
    fixed = sum((T[p] for p in FIXED), start=0.0)
    attn_side = _branch(R1, ATTN_BRANCH)
    mlp_side = _branch(GL, MLP_BRANCH)
    out_side = _branch(R2, OUT_BRANCH)
    n_handovers = N_PDL_FIXED + sum((_count(d, PDL_HANDOVERS[d.decision.name]) for d in (R1, GL, R2)), start=0)
    params, decisions, constraints, parts = (*(T[p] for p in PARTS), T_PDL, N_PDL_FIXED), DECISIONS, (), PARTS
    if norm_fusion:
        fixed = where(NF.eq(1), sum((T[p] for p in FIXED_NF), start=0.0), fixed)
        attn_side = where(NF.eq(1), _branch(R1, ATTN_BRANCH_NF), attn_side)
        mlp_side = where(NF.eq(1), _branch(GL, MLP_BRANCH_NF), mlp_side)
        n_handovers = n_handovers - where(NF.eq(1), NF_HANDOVERS, 0)
        params, decisions = (*params, *(T[p] for p in NORM_PARTS), NF_OK), (*DECISIONS, NF)
        parts = {**PARTS, **NORM_PARTS}
        constraints = (Constraint("NF1", NF <= NF_OK, "scope", "the norm-fused GEMVs exist (decode)"),
                       Constraint("NF2", NF.eq(0) | (R1 <= 1), "layout", "R1 = 2's kernel is the norm: not with NF"))
    if rope_fusion:
        fixed = where(RA.eq(1), fixed - T["rope"] - T["attn"] + T["attn_rope"], fixed)
        n_handovers = n_handovers - where(RA.eq(1), RA_HANDOVERS, 0)
        params, decisions = (*params, *(T[p] for p in ROPE_PARTS), RA_OK), (*decisions, RA)
        parts = {**parts, **ROPE_PARTS}
        constraints = (*constraints, Constraint("RA1", RA <= RA_OK, "scope", "attention takes the rope (decode)"))
    pdl_saving = where(PD.eq(1), T_PDL * n_handovers, 0.0)
    return Template(
        name=NAME,
        doc=__doc__.strip().splitlines()[0],
        decisions=decisions,
        params=params,
        scope=tuple(Constraint(f"{name}_time", T[name] >= 0, "scope", "part times are >= 0") for name in parts),
        constraints=constraints,
        preconditions=(),
        cost=fixed + attn_side + mlp_side + out_side - pdl_saving,
        unit="us",
        terms={"T_attention_side_us": attn_side, "T_mlp_us": mlp_side, "T_down_side_us": out_side,
               "T_fixed_us": fixed, "T_pdl_saving_us": pdl_saving},
        tie_break=("T_attention_side_us",),
        obligations=lambda template: fusion_plan(norm_fusion, rope_fusion),
        options={"model": model, **({"norm_fusion": True} if norm_fusion else {}),
                 **({"rope_fusion": True} if rope_fusion else {})},
        descriptor={"algorithm": "qwen3_layer", "reuse": "fusion of neighbouring operations",
                    "placement": "one stream of kernels", "resources": "DRAM traffic and launches"},
    )


def fusion_plan(norm_fusion: bool = False, rope_fusion: bool = False) -> ProofPlan:
    """K2 by test: each fusion choice's kernels against the fp32 reference (qwen3_layer_check)."""
    return ProofPlan(fixed_reason="the part times are data; the choices are checked on the tiny config",
                     bounds={"config": "tiny (hidden 256, heads 4/2, head_dim 64, intermediate 512)",
                             "scenarios": "prefill:8, decode:40"},
                     checks=(lambda run: check_fusions(run, norm_fusion, rope_fusion),))


def check_fusions(run=None, norm_fusion: bool = False, rope_fusion: bool = False) -> list[ObligationResult]:
    """Run qwen3_layer_check in a subprocess (the Triton interpreter needs its switch set before
    triton is imported); one obligation per (choice, scenario): checked by test, not proved. With
    `norm_fusion` the NF = 1 choices too (decode), with `rope_fusion` the RA = 1 ones (decode)."""
    t0 = time.time()
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-m", "formloop.library.qwen3_layer_check",
                           *(["--norm-fusion"] if norm_fusion else []), *(["--rope-fusion"] if rope_fusion else [])],
                          capture_output=True, text=True, env=env, check=False)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    out = []
    for r in rows:
        if "fusion" not in r:
            continue
        fu = Fusion.of(r["fusion"])
        name = f"computes-layer[{fu.text}; {r['scenario']}]"
        verdict = Verdict.PROVED if r["ok"] else Verdict.COUNTEREXAMPLE
        out.append(ObligationResult(name, verdict, time.time() - t0, solver="triton-interpreter vs fp32 torch",
                                    witness=None if r["ok"] else r, reason="checked by test on the tiny config",
                                    details=r))
    if not out:
        out.append(ObligationResult("computes-layer", Verdict.UNRESOLVED, time.time() - t0,
                                    reason=f"the check did not run: {proc.stderr.strip()[-300:]}"))
    for r in check_sources():  # PD = 1: each kernel's source keeps the PDL rules (its PTX: on a GPU, the benchmark)
        out.append(ObligationResult(f"pdl-rules[{r['kernel']}]", Verdict.PROVED if r["ok"] else Verdict.COUNTEREXAMPLE,
                                    time.time() - t0, solver="source check (pdl_check)",
                                    witness=None if r["ok"] else r["violations"],
                                    reason="no store and no read of an earlier kernel's buffer before an "
                                           "unconditional wait", details=r))
    return out
