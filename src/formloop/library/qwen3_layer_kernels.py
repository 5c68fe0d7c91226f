"""The Qwen3 layer as Triton kernels: a plan (fusion + each part's design) bound to weights and
buffers once, then run many times (plan once, run many).

Parts and their kernels: RMSNorm and the fused residual-add RMSNorm (rowwise), the GEMMs with their
epilogue chains (gemm-epilogue-gpu: B is the weight as nn.Linear keeps it, a `col` operand), the
q/k RMSNorm + RoPE + KV-cache write (qk-norm-rope-kv), attention (attention-prefill /
attention-decode), residual adds and SiLU·mul as their own kernels (elementwise), and the prefill
output relayout (a copy kernel here: the prefill kernel stores [heads, tokens, head_dim]).

The KV cache is [1, kv_heads, capacity, head_dim] per K and V; attention reads it contiguous, so
its capacity is the scenario's kv_len (history + new tokens). Set TRITON_INTERPRET=1 before
importing this module to run on the CPU (small shapes)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import torch
import triton
import triton.language as tl

from formloop.errors import InvalidInput
from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan
from formloop.library.attention_decode_newtoken import NewToken
from formloop.library.attention_prefill_kernel import PrefillConfig, PrefillPlan
from formloop.library.elementwise_kernel import ElementwiseProgram, EwConfig
from formloop.library.gemm_epilogue_emit import KernelSpec, Shape
from formloop.library.gemm_epilogue_kernel import EpiloguePlan
from formloop.library.gemm_epilogue_launch import run as gemm_run
from formloop.library.gemm_epilogue_ops import parse_chain_text
from formloop.library.gemm_tiling_kernel import TileConfig
from formloop.library.qwen3_layer import Qwen3Config, Scenario
from formloop.library.qk_rope_kernel import QkRopeConfig, QkRopeProgram
from formloop.library.qk_rope_kernel import rope_tables as rope_half_tables
from formloop.library.qwen3_layer_template import Fusion
from formloop.library.rowwise_kernel import RowConfig, RowwiseProgram

ADD = "add(name=residual)"
SILU_MUL = "silu >> mul(name=up)"


@triton.jit
def _relayout_kernel(src, dst, T, H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr):
    """dst[t, h·D + d] = src[h, t, d] for a block of BT tokens of one head."""
    pid_t = tl.program_id(0)
    h = tl.program_id(1)
    t = pid_t * BT + tl.arange(0, BT)
    d = tl.arange(0, D)
    m = (t < T)[:, None]
    x = tl.load(src + (h * T + t[:, None]).to(tl.int64) * D + d[None, :], mask=m)
    tl.store(dst + t[:, None].to(tl.int64) * (H * D) + h * D + d[None, :], x, mask=m)


def relayout(src: torch.Tensor, dst: torch.Tensor, block: int = 32) -> None:
    """[1, H, T, D] head-major attention output -> [T, H·D] token-major rows."""
    _, H, T, D = src.shape
    _relayout_kernel[(triton.cdiv(T, block), H)](src, dst, T, H=H, D=D, BT=block, num_warps=4)


def gateup_weight(w_gate: torch.Tensor, w_up: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """[2I, H]: rows (gate_j, up_j) interleaved for the glu epilogue, else all gate rows then all up rows."""
    if interleaved:
        return torch.stack([w_gate, w_up], dim=1).reshape(-1, w_gate.shape[1]).contiguous()
    return torch.cat([w_gate, w_up], dim=0).contiguous()


def _gemm(design: Mapping[str, int], M: int, N: int, K: int, chain: str = "", pdl: bool = False,
          norm_eps: float | None = None) -> EpiloguePlan:
    """`norm_eps`: A's rows RMS-normalized in the GEMV's loop with this eps (the part's `a_norm_weight`)."""
    spec = KernelSpec(ab="bf16", c="bf16", lb="col", chain=parse_chain_text(chain), name="qwen3_gemm",
                      a_norm=norm_eps is not None)
    return EpiloguePlan(spec, TileConfig.from_assignment(design), Shape(M, N, K), pdl=pdl,
                        a_norm_eps=1e-6 if norm_eps is None else norm_eps)


class RopeKV:
    """qk-norm-rope-kv over the QKV GEMM's output: q heads to `q_out` [T, Hq, D] (any token and head
    strides), k and v to the head-major caches at positions history.. (slot = position, batch 1)."""

    def __init__(self, design: Mapping[str, int], cfg: Qwen3Config, sc: Scenario, device, pdl: bool = False):
        self.cfg = cfg
        self.prog = QkRopeProgram(QkRopeConfig.from_assignment(design), "bf16", pdl=pdl)
        self.cos, self.sin = rope_half_tables(sc.kv_len, cfg.head_dim, cfg.rope_theta, device=device)
        self.pos = torch.arange(sc.history, sc.kv_len, device=device, dtype=torch.int32)

    def __call__(self, qkv, q_weight, k_weight, q_out, k_cache, v_cache) -> None:
        c, T = self.cfg, qkv.shape[0]
        q = qkv[:, : c.q_width].view(T, c.heads, c.head_dim)
        k = qkv[:, c.q_width: c.q_width + c.kv_width].view(T, c.kv_heads, c.head_dim)
        v = qkv[:, c.q_width + c.kv_width:].view(T, c.kv_heads, c.head_dim)
        self.prog(q, k, v, q_weight, k_weight, self.cos, self.sin, self.pos, self.pos, k_cache, v_cache,
                  heads_first=True, eps=c.eps, q_out=q_out)


class LayerKernels:
    """One scenario's layer, ready to run: `designs` maps part name -> design (the plan's). `pdl`
    (the fusion's PD): the norms, GEMMs, the rope kernel and decode attention are launched as
    programmatic dependents (formloop.library.pdl); the element-wise kernels, the relayout and
    prefill attention are launched plainly (the stream then orders them fully)."""

    def __init__(self, cfg: Qwen3Config, sc: Scenario, fusion: Fusion, designs: Mapping[str, Mapping[str, int]],
                 weights: Mapping[str, torch.Tensor], device, pdl: bool | None = None):
        self.cfg, self.sc, self.fusion = cfg, sc, fusion
        self.pdl = pdl = bool(fusion.PD) if pdl is None else bool(pdl)
        T, H, I = sc.tokens, cfg.hidden, cfg.intermediate
        self.prefill = sc.kind == "prefill"
        self.nf = nf = bool(fusion.NF)
        if nf and self.prefill:
            raise InvalidInput("fusion NF", 1, "0 for a prefill (the norm-fused GEMVs are decode's)")
        self.parts = fusion.parts(self.prefill)
        w = {k: v.to(device) for k, v in weights.items()}
        self.w = w
        self.w_gu = gateup_weight(w["w_gate"], w["w_up"], interleaved=bool(fusion.GL))
        dt = torch.bfloat16

        def buf(*shape, dtype=dt):
            return torch.empty(shape, device=device, dtype=dtype)

        g = {}
        eps = cfg.eps if nf else None
        g["qkv"] = _gemm(designs["qkv_norm" if nf else "qkv"], T, cfg.qkv_width, H, pdl=pdl, norm_eps=eps)
        g["oproj"] = _gemm(designs["oproj_add" if fusion.R1 == 1 else "oproj"], T, H, cfg.q_width,
                           ADD if fusion.R1 == 1 else "", pdl=pdl)
        self.gateup_part = ("gateup_glu" if fusion.GL else "gateup") + ("_norm" if nf else "")
        g["gateup"] = _gemm(designs[self.gateup_part], T, 2 * I, H, "glu(act=silu)" if fusion.GL else "", pdl=pdl,
                            norm_eps=eps)
        g["down"] = _gemm(designs["down_add" if fusion.R2 else "down"], T, H, I, ADD if fusion.R2 else "", pdl=pdl)
        self.gemms = g
        self.ws = {k: p.new_workspace(device) for k, p in g.items()}
        self.norm1 = RowwiseProgram("rmsnorm", RowConfig.from_assignment(designs["norm1"]), T, H, "bf16", pdl=pdl)
        op2 = "rmsnorm-residual" if fusion.R1 == 2 else "rmsnorm"
        self.norm2 = RowwiseProgram(op2, RowConfig.from_assignment(designs["addnorm2" if fusion.R1 == 2 else "norm2"]),
                                    T, H, "bf16", pdl=pdl)
        self.add1 = ElementwiseProgram(ADD, EwConfig.from_assignment(designs["add1"])) if fusion.R1 == 0 else None
        self.add2 = ElementwiseProgram(ADD, EwConfig.from_assignment(designs["add2"])) if not fusion.R2 else None
        self.silu = ElementwiseProgram(SILU_MUL, EwConfig.from_assignment(designs["silu_mul"])) if not fusion.GL \
            else None
        self.ra = ra = bool(fusion.RA)
        if ra and self.prefill:
            raise InvalidInput("fusion RA", 1, "0 for a prefill (decode attention takes the rope inside)")
        self.rope = RopeKV(designs["rope"], cfg, sc, device, pdl=pdl)
        wl = {"B": 1, "Hq": cfg.heads, "Hkv": cfg.kv_heads, "D": cfg.head_dim, "L": sc.kv_len}
        if self.prefill:
            self.attn = PrefillPlan.of(PrefillConfig.from_assignment(designs["attn"]), wl, "bf16")
            self.attn_ws = None
            self.q = buf(1, cfg.heads, T, cfg.head_dim)
            self.o_heads = buf(1, cfg.heads, T, cfg.head_dim)
        else:
            # RA: the same design with the rope inside (designs["attn"] is attn_rope's design too)
            self.attn = replace(DecodePlan.of(DecodeConfig.from_assignment(designs["attn"]), wl, "bf16"), chain_pdl=pdl,
                                rope=ra, rope_eps=cfg.eps)
            self.attn_ws = self.attn.new_workspace(device)
            self.q = buf(1, cfg.heads, cfg.head_dim)
            self.o_heads = self.q.new_empty(1, cfg.heads, cfg.head_dim)
        self.h = buf(T, H)
        self.qkv = buf(T, cfg.qkv_width)
        self.o = buf(T, cfg.q_width)
        self.h1 = buf(T, H)        # x + attention
        self.h2 = buf(T, H)        # rms(h1)
        self.tmp = buf(T, H)       # O-proj or Down output before its residual add
        self.act = buf(T, I) if fusion.GL else buf(T, 2 * I)
        self.mlp = buf(T, I)

    def check_cache(self, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        want = (1, self.cfg.kv_heads, self.sc.kv_len, self.cfg.head_dim)
        for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
            if tuple(c.shape) != want or not c.is_contiguous() or c.dtype != torch.bfloat16:
                raise InvalidInput(f"{name}", (tuple(c.shape), str(c.dtype)), f"contiguous bf16 {list(want)} "
                                   "(capacity = history + new tokens)")

    def __call__(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 out: torch.Tensor) -> torch.Tensor:
        """out [T, hidden] = layer(x); writes the new tokens' K and V into the caches."""
        for _, step in self.steps(x, k_cache, v_cache, out):
            step()
        return out

    def steps(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor):
        """[(part, launch)] in order: each launch reads the buffers the ones before it wrote, so a
        part can be timed alone once the whole layer has run."""
        cfg, fu = self.cfg, self.fusion
        if k_cache is not None:
            self.check_cache(k_cache, v_cache)
        g, w, ws = self.gemms, self.w, self.ws
        I = cfg.intermediate
        q_rows = self.q[0].transpose(0, 1) if self.prefill else self.q[0].view(1, cfg.heads, cfg.head_dim)
        if self.nf:  # the norms inside the QKV and GateUp GEMVs
            s = [("qkv_norm", lambda: gemm_run(g["qkv"], {"a": x, "b": w["w_qkv"].T, "a_norm_weight": w["w_in"]},
                                                      self.qkv, ws["qkv"]))]
        else:
            s = [("norm1", lambda: self.norm1(x, weight=w["w_in"], eps=cfg.eps, out=self.h)),
                 ("qkv", lambda: gemm_run(g["qkv"], {"a": self.h, "b": w["w_qkv"].T}, self.qkv, ws["qkv"]))]
        if self.ra:  # attention normalizes and rotates q and the new key itself and writes the new K/V row
            qw, kvw, hd = cfg.q_width, cfg.kv_width, cfg.head_dim
            q_raw = self.qkv[:, :qw].view(1, cfg.heads, hd)
            new = NewToken(self.qkv[:, qw: qw + kvw].view(1, cfg.kv_heads, hd),
                           self.qkv[:, qw + kvw:].view(1, cfg.kv_heads, hd), w["q_norm"], w["k_norm"], self.rope.cos,
                           self.rope.sin)
            s += [("attn_rope", lambda: self.attn.run(q_raw, k_cache, v_cache, self.o_heads, self.attn_ws, new=new))]
        else:
            s += [("rope", lambda: self.rope(self.qkv, w["q_norm"], w["k_norm"], q_rows, k_cache, v_cache))]
        if self.prefill:
            s += [("attn", lambda: self.attn.run(self.q, k_cache, v_cache, self.o_heads)),
                  ("relayout", lambda: relayout(self.o_heads, self.o))]
            o = self.o
        else:
            if not self.ra:
                s += [("attn", lambda: self.attn.run(self.q, k_cache, v_cache, self.o_heads, self.attn_ws))]
            o = self.o_heads.view(1, cfg.q_width)
        norm2 = [] if self.nf else [("norm2", lambda: self.norm2(self.h1, weight=w["w_post"], eps=cfg.eps,
                                                                 out=self.h2))]
        if fu.R1 == 1:
            s += [("oproj_add", lambda: gemm_run(g["oproj"], {"a": o, "b": w["w_o"].T, "residual": x}, self.h1,
                                                          ws["oproj"])), *norm2]
        else:
            s += [("oproj", lambda: gemm_run(g["oproj"], {"a": o, "b": w["w_o"].T}, self.tmp, ws["oproj"]))]
            if fu.R1 == 2:
                s += [("addnorm2", lambda: self.norm2(self.tmp, weight=w["w_post"], residual=x, eps=cfg.eps,
                                                      out=self.h2, residual_out=self.h1))]
            else:
                s += [("add1", lambda: self.add1(self.tmp, {"residual": x}, out=self.h1)), *norm2]
        gu_in = {"a": self.h1, "b": self.w_gu.T, "a_norm_weight": w["w_post"]} if self.nf else \
            {"a": self.h2, "b": self.w_gu.T}
        s += [(self.gateup_part, lambda: gemm_run(g["gateup"], gu_in, self.act, ws["gateup"]))]
        if fu.GL:
            mlp = self.act
        else:
            s += [("silu_mul", lambda: self.silu(self.act[:, :I], {"up": self.act[:, I:]}, out=self.mlp))]
            mlp = self.mlp
        if fu.R2:
            s += [("down_add", lambda: gemm_run(g["down"], {"a": mlp, "b": w["w_down"].T, "residual": self.h1}, out,
                                                        ws["down"]))]
        else:
            s += [("down", lambda: gemm_run(g["down"], {"a": mlp, "b": w["w_down"].T}, self.tmp, ws["down"])),
                  ("add2", lambda: self.add2(self.tmp, {"residual": self.h1}, out=out))]
        return s
