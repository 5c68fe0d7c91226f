"""`SOLReport`: the speed-of-light bound of one workload on one chip, as data, JSON and a table.

The bound is max(compute time, memory time) (seed 002, §4.1). Compute time is itself a max:
tensor-eligible FLOPs at the tensor peak of the compute precision, and the remaining (vector)
FLOPs at the SIMT rate, because the two units run side by side. Memory time is the minimum bytes
at DRAM bandwidth. Every variant keeps the bytes and changes only the compute precision, e.g. FP32
data cast on chip to FP16 tensor cores (seed 002, App. A.2)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from rich.table import Table

from formloop.dtypes import dtype_bytes, get_dtype
from formloop.errors import InvalidInput
from formloop.hw.chips import Chip
from formloop.sol.ops import SOL_DTYPES, Counts

# Compute precisions a storage dtype may be computed in without loss of its accumulation range;
# the first one the chip has is the default (FP32 GEMMs on TF32 tensor cores, seed 002 App. A.2).
# Narrower types compute at their own peak only. tf32x3 (about fp32 accuracy on tf32 tensor cores,
# three dots) is priced at the tf32 peak / 3 (formloop.dtypes, Chip.peak).
COMPUTE_PRECISIONS = {d: ("tf32", "tf32x3", "fp32", "bf16", "fp16") if d == "fp32" else (get_dtype(d).peak,)
                      for d in SOL_DTYPES}


@dataclass(frozen=True)
class SOLReport:
    op: str
    shape: Mapping[str, object]
    dtype: str
    chip: str
    clock_mhz: float
    flops: int
    bytes: int
    intensity: float                 # FLOP/byte
    peak_flops: float                # FLOP/s of the tensor (or SIMT) unit at `compute_precision`
    bandwidth: float                 # bytes/s
    t_compute_s: float
    t_memory_s: float
    time_floor_s: float
    bound: str                       # 'compute' | 'memory'
    variants: Mapping[str, float]    # compute precision -> time floor, s (same bytes)
    compute_precision: str = ""
    matmul_flops: int = 0
    vector_flops: int = 0
    vector_peak_flops: float = 0.0
    source: str = "model"            # 'model' (hand formula) | 'dispatch' (counted torch operators)
    notes: tuple[str, ...] = field(default_factory=tuple)
    uncounted: tuple[str, ...] = ()  # operators without a FLOP rule ('aten::op x calls'): FLOPs undercounted
    by_op: Mapping[str, Mapping[str, int]] = field(default_factory=dict)   # op -> calls, flops, unfused_bytes

    @property
    def precision_words(self) -> str:
        """'bf16 data, fp32 arithmetic' (or one word where they agree): what a floor's note names."""
        c = self.compute_precision or self.dtype
        return self.dtype if c == self.dtype else f"{self.dtype} data, {c} arithmetic"

    @property
    def lower_bound(self) -> bool:
        """True when some operator had no FLOP rule: the floor is below the true speed of light."""
        return bool(self.uncounted)

    @property
    def unfused_bytes(self) -> int:
        """DRAM bytes if every counted operator ran alone (each reads its inputs, writes its outputs)."""
        return sum(row["unfused_bytes"] for row in self.by_op.values())

    @property
    def most_generous_s(self) -> float:
        """The lowest floor over the allowed precision assumptions (for ceiling checks)."""
        return min(self.variants.values())

    @property
    def floors_s(self) -> dict[str, float]:
        """`variants` under the name the integrity checks look for: precision -> floor, s."""
        return dict(self.variants)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["shape"], d["variants"], d["notes"] = dict(self.shape), dict(self.variants), list(self.notes)
        d["uncounted"], d["by_op"] = list(self.uncounted), {k: dict(v) for k, v in self.by_op.items()}
        d["lower_bound"], d["unfused_bytes"] = self.lower_bound, self.unfused_bytes
        d["units"] = {"flops": "FLOP", "bytes": "byte", "intensity": "FLOP/byte", "peak_flops": "FLOP/s",
                      "bandwidth": "byte/s", "times": "s", "clock_mhz": "MHz", "unfused_bytes": "byte"}
        return d

    def table(self) -> Table:
        shape = ", ".join(f"{k}={v}" for k, v in self.shape.items())
        t = Table(title=f"speed of light: {self.op}({shape}) {self.dtype}, {self.chip} @ {self.clock_mhz:g} MHz")
        t.add_column("quantity")
        t.add_column("value", justify="right")
        t.add_column("unit")
        how = {"model": "model: hand formula", "dispatch": "model: counted torch operators"}[self.source]
        rows = [
            ("source", how, ""),
            ("FLOPs", f"{self.flops:.4e}", "FLOP"),
            ("  tensor-eligible", f"{self.matmul_flops:.4e}", "FLOP"),
            ("  vector", f"{self.vector_flops:.4e}", "FLOP"),
            ("minimum DRAM bytes", f"{self.bytes:.4e}", "byte"),
            ("arithmetic intensity", f"{self.intensity:.2f}", "FLOP/byte"),
            (f"peak {self.compute_precision}", f"{self.peak_flops / 1e12:.2f}", "TFLOP/s"),
            ("vector peak", f"{self.vector_peak_flops / 1e12:.2f}", "TFLOP/s"),
            ("DRAM bandwidth", f"{self.bandwidth / 1e12:.3f}", "TB/s"),
            ("compute time", *_time(self.t_compute_s)),
            ("memory time", *_time(self.t_memory_s)),
            ("time floor", _time(self.time_floor_s)[0], f"{_time(self.time_floor_s)[1]} ({self.bound}-bound)"
             + (", LOWER bound: uncounted operators" if self.lower_bound else "")),
        ]
        if self.by_op:
            rows.insert(5, ("  unfused (each operator alone)", f"{self.unfused_bytes:.4e}", "byte"))
        rows += [(f"  floor if computed in {p}", *_time(s)) for p, s in self.variants.items()]
        for row in rows:
            t.add_row(*row)
        if self.notes:
            t.caption = "; ".join(self.notes)
        return t


def _time(seconds: float) -> tuple[str, str]:
    """ms to four decimals (the seed's precision) down to 10 us, then us to four significant digits."""
    if seconds >= 1e-5:
        return f"{seconds * 1e3:.4f}", "ms"
    return f"{seconds * 1e6:.4g}", "us"


def vector_peak(chip: Chip, dtype: str) -> float:
    """SIMT rate for non-tensor work: FP32 lanes, doubled for packed 16-bit arithmetic."""
    return chip.peak("fp32") * (2 if dtype_bytes(dtype) == 2 else 1)


def allowed_precisions(chip: Chip, dtype: str) -> list[str]:
    return [p for p in COMPUTE_PRECISIONS[dtype] if chip.has_precision(p)]


def build_report(op: str, shape: Mapping, dtype: str, chip: Chip, counts: Counts, *,
                 compute_precision: str | None = None, source: str = "model",
                 notes: tuple[str, ...] = (), uncounted: tuple[str, ...] = (),
                 by_op: Mapping[str, Mapping[str, int]] | None = None) -> SOLReport:
    """Price `counts` on `chip` (already at its clock) and fill a report."""
    allowed = allowed_precisions(chip, dtype)
    if compute_precision is None:
        if not allowed:
            raise InvalidInput(f"compute precision for {dtype} on {chip.name}", None, sorted(chip.peak_flops),
                               fix="pass compute_precision explicitly")
        compute_precision = allowed[0] if counts.matmul_flops else "fp32"
    peak = chip.peak(compute_precision)        # raises, naming the chip's precisions
    vpeak = vector_peak(chip, dtype)
    t_mem = counts.bytes / chip.bandwidth

    def t_compute(p_peak: float) -> float:
        return max(counts.matmul_flops / p_peak, counts.vector_flops / vpeak)

    tc = t_compute(peak)
    variants = {p: max(t_compute(chip.peak(p)), t_mem) for p in allowed} if counts.matmul_flops else {}
    variants.setdefault(compute_precision, max(tc, t_mem))
    return SOLReport(
        op=op, shape=dict(shape), dtype=dtype, chip=chip.name, clock_mhz=chip.clock_hz / 1e6,
        flops=counts.flops, bytes=counts.bytes,
        intensity=counts.flops / counts.bytes if counts.bytes else float("inf"),
        peak_flops=peak, bandwidth=chip.bandwidth, t_compute_s=tc, t_memory_s=t_mem,
        time_floor_s=max(tc, t_mem), bound="compute" if tc >= t_mem else "memory",
        variants=variants, compute_precision=compute_precision,
        matmul_flops=counts.matmul_flops, vector_flops=counts.vector_flops, vector_peak_flops=vpeak,
        source=source, notes=tuple(notes), uncounted=tuple(uncounted), by_op=dict(by_op or {}),
    )
