"""What an assembled `ModelNew` calls for a convolution region: an NCHW nn.Conv2d (groups 1, zero
padding) as one gemm-epilogue instance, with the bias, an eval-mode BatchNorm (folded into a
per-channel scale and shift of the epilogue) and the following elementwise chain fused.

Two lowerings (`via`):
* `implicit`: the gemm-epilogue `conv2d` operation (implicit GEMM, NHWC input, KRSC filter). The
  NCHW input is read through its NHWC view: free when the input is already channels-last (the
  output of a previous conv region is), else one layout copy (`x.permute(0, 2, 3, 1).contiguous()`);
  the filter is permuted to KRSC on each call (K·C·R·S elements).
* `gemm`: stride == filter, no padding, dilation 1 (patch embedding; a 1x1 stride-1 conv is the
  R = S = 1 case): the patches are the rows of a plain GEMM A[(n, p, q), (c, r, s)], a reshaped
  view of the input (a view for a channels-last 1x1 input, else one copy), against the filter as
  stored, [K, C·R·S] (no copy), through `fused_gemm.gemm_chain` (so the TMA path is open).

A BatchNorm2d in training mode cannot be folded (its statistics are the batch's): the kernel writes
the conv output, torch reduces it per channel (one read) and one elementwise pass applies the
normalization and the chain after it (`post`); the running statistics are updated as PyTorch does.

The output is the kernel's [(n, p, q), K] matrix viewed as NCHW: a channels-last NCHW tensor (no
copy back); PyTorch ops after the region take it as it is. Set TRITON_INTERPRET=1 before the first
triton import to run in the interpreter (no CUDA device)."""
from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import torch

from formloop.errors import InvalidInput
from formloop.library.gemm_epilogue_emit import Conv2d, KernelSpec, Shape
from formloop.library.gemm_epilogue_ops import parse_chain_text

_PLANS: dict[tuple, object] = {}
VIAS = ("implicit", "gemm")


@lru_cache(maxsize=256)
def _spec(ab: str, c: str, chain: str) -> KernelSpec:
    return KernelSpec(op="conv2d", ab=ab, c=c, la="row", lb="col", lc="row", chain=parse_chain_text(chain),
                      name="fused_conv2d")


def _plan(spec: KernelSpec, config: tuple, shape: Shape):
    from formloop.library.gemm_epilogue_kernel import EpiloguePlan
    from formloop.library.gemm_tiling_kernel import TileConfig

    key = (spec, config, shape)
    if key not in _PLANS:
        _PLANS[key] = EpiloguePlan(spec, TileConfig(**dict(config)), shape)
    return _PLANS[key]


def bn_fold(bn: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift) per channel of an eval-mode BatchNorm: y = x·scale + shift."""
    if bn.training or bn.running_mean is None:
        raise InvalidInput("batch norm mode of a folded conv region", "training" if bn.training else "no running stats",
                           "eval with running statistics (the region was built with them folded into the epilogue)")
    scale = torch.rsqrt(bn.running_var + bn.eps)
    if bn.weight is not None:
        scale = scale * bn.weight
    shift = -bn.running_mean * scale
    if bn.bias is not None:
        shift = shift + bn.bias
    return scale, shift


def bn_batch_scale_shift(bn: torch.nn.Module, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift) per channel of a BatchNorm2d on the conv output `y` [(n, p, q), K], as
    nn.BatchNorm2d.forward computes it: in training mode (or without running statistics) from the
    batch's biased variance, updating the running statistics (unbiased variance, momentum or the
    cumulative average) like F.batch_norm; in eval mode from the running statistics."""
    if not (bn.training or bn.running_mean is None):
        return bn_fold(bn)
    var, mean = torch.var_mean(y, dim=0, correction=0)
    if bn.training and bn.track_running_stats:
        n = y.shape[0]
        with torch.no_grad():
            bn.num_batches_tracked.add_(1)
            if bn.momentum is None:   # the cumulative moving average, kept on the device (no host sync)
                f = 1.0 / bn.num_batches_tracked.to(mean.dtype)
                bn.running_mean.mul_(1 - f).add_(mean * f)
                bn.running_var.mul_(1 - f).add_(var * (n / max(n - 1, 1)) * f)
            else:
                bn.running_mean.mul_(1 - bn.momentum).add_(mean, alpha=bn.momentum)
                bn.running_var.mul_(1 - bn.momentum).add_(var, alpha=bn.momentum * n / max(n - 1, 1))
    scale = torch.rsqrt(var + bn.eps)
    if bn.weight is not None:
        scale = scale * bn.weight
    shift = -mean * scale
    if bn.bias is not None:
        shift = shift + bn.bias
    return scale, shift


def conv_geometry(x: torch.Tensor, w: torch.Tensor, stride, padding, dilation) -> Conv2d:
    n, c, h, wd = x.shape
    k, cw, r, s = w.shape
    if cw != c:
        raise InvalidInput("conv input channels", c, f"{cw} (the filter's, groups 1)")
    return Conv2d(n, h, wd, c, k, r, s, tuple(stride), tuple(padding), tuple(dilation))


def patch_rows(x: torch.Tensor, g: Conv2d) -> torch.Tensor:
    """The GEMM rows of a stride == filter, unpadded conv: [(n, p, q), (c, r, s)] (a view when it can be)."""
    xs = x[:, :, :g.p * g.r, :g.q * g.s]
    rows = xs.reshape(g.n, g.c, g.p, g.r, g.q, g.s).permute(0, 2, 4, 1, 3, 5).reshape(g.n * g.p * g.q, g.c * g.r * g.s)
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def conv_chain(x: torch.Tensor, w: torch.Tensor, *, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
               via: str = "implicit", ab: str = "fp32", c: str = "fp32", chain: str = "",
               config: Mapping[str, int], bias: torch.Tensor | None = None, bn: torch.nn.Module | None = None,
               post: str = "", post_config: Mapping[str, int] | None = None) -> torch.Tensor:
    """chain(conv2d(x, w) [+ bias] [folded bn]) for NCHW x [n, c, h, w] and w [k, c, r, s]; the chain's
    tensors are named `bias`, `bn_scale`, `bn_shift` (see the module docstring). With `post` (an
    elementwise chain reading `bn_scale` and `bn_shift`), `bn` is applied after the kernel instead:
    its per-channel scale and shift from the batch statistics of the kernel's output (training mode)
    or the running ones (eval), then `post` runs on the output by one elementwise pass (config
    `post_config`, formloop.library.fused_vector.ew_chain)."""
    if via not in VIAS:
        raise InvalidInput("conv lowering (via)", via, VIAS)
    g = conv_geometry(x, w, stride, padding, dilation)
    tensors: dict[str, torch.Tensor] = {}
    if bias is not None:
        tensors["bias"] = bias
    if post and (bn is None or post_config is None):
        raise InvalidInput("post chain of a conv region", post, "given with its BatchNorm and post_config")
    if bn is not None and not post:
        tensors["bn_scale"], tensors["bn_shift"] = bn_fold(bn)
    if via == "gemm":
        if g.stride != (g.r, g.s) or g.pad != (0, 0) or g.dilation != (1, 1):
            raise InvalidInput("conv geometry for via=gemm", (g.stride, g.pad, g.dilation),
                               "stride == filter, padding 0, dilation 1")
        from formloop.library.fused_gemm import gemm_chain

        out = gemm_chain(patch_rows(x, g), w.reshape(g.k, g.c * g.r * g.s), op="gemm", ab=ab, c=c, lb="col",
                         chain=chain, config=config, tensors=tensors)
    else:
        from formloop.library.gemm_epilogue_kernel import new_output

        xh = x.permute(0, 2, 3, 1)
        if not xh.is_contiguous():
            xh = xh.contiguous()          # the NCHW -> NHWC layout stage (free for a channels-last input)
        b = w.permute(0, 2, 3, 1).reshape(g.k, g.r * g.s * g.c).T   # the logical [RSC, K] of the KRSC filter
        plan = _plan(_spec(ab, c, chain), tuple(sorted(config.items())), Shape.of_conv(g))
        out = new_output(plan, x.device)
        plan.launch({"a": xh, "b": b, **tensors}, out, plan.new_workspace(x.device))
    if post:
        from formloop.library.fused_vector import ew_chain

        scale, shift = bn_batch_scale_shift(bn, out)
        out = ew_chain(post, out, {"bn_scale": scale, "bn_shift": shift}, config=post_config)
    return out.view(g.n, g.p, g.q, g.k).permute(0, 3, 1, 2)
