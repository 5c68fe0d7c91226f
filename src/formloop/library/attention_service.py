"""Plain functions behind `formloop solve|prove|measure attention-decode|attention-prefill
--shape B,Hq,Hkv,D,L` (formloop.api calls these with the calibration it resolved; they print nothing).

Every number in a report says its unit in its key (_us, _bytes, _tb_s, _fraction) and its source
in `source` (model: the template's cost; solver: HiGHS; sol: the speed-of-light formula; gpu or
model: the evaluator's tier)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from formloop.errors import InvalidInput
from formloop.evaluate import ModelEvaluator, best_available, gpu_available
from formloop.evaluate.calibrate import Calibration
from formloop.hw.chips import get_chip
from formloop.library import attention_decode, attention_prefill, get_template
from formloop.library.attention_workload import DTYPE_BYTES, AttentionWorkload, parse_shape, split_workload
from formloop.library.gemm_tiling_gpu import CONTRACT
from formloop.sol import sol_report
from formloop.solve import SOLVERS, enumerate_designs
from formloop.verify import prove_template

TEMPLATES = (attention_decode.NAME, attention_prefill.NAME)
MODULES = {attention_decode.NAME: attention_decode, attention_prefill.NAME: attention_prefill}
SOL_OPS = {attention_decode.NAME: "attention_decode", attention_prefill.NAME: "attention_prefill"}


def is_attention(name: str) -> bool:
    return name in TEMPLATES


def _check_name(name: str) -> None:
    if name not in TEMPLATES:
        raise InvalidInput("attention template", name, TEMPLATES)


def load_calibration(path: str | Path | None) -> tuple[dict[str, float] | None, str]:
    """(values, id) of a calibration JSON written by benchmarks/attention.py, or (None, 'priors')."""
    if path is None:
        return None, "priors"
    p = Path(path)
    if not p.is_file():
        raise InvalidInput("calibration", str(path), "a calibration JSON written by benchmarks/attention.py")
    cal = Calibration.load(p)
    return dict(cal.values), cal.key


def template(name: str, dtype: str = "bf16", calibration: str | Path | Mapping[str, float] | None = None):
    """The attention template `name`, its efficiency terms from `calibration` (a path or a mapping)."""
    _check_name(name)
    if isinstance(calibration, Mapping):
        return get_template(name, dtype=dtype, calibration=dict(calibration), calibration_id="given")
    values, key = load_calibration(calibration)
    return get_template(name, dtype=dtype, calibration=values, calibration_id=key)


def attention_workload(name: str, shape, dtype: str = "bf16", *, page: int | None = None,
                       causal: int | None = None) -> dict[str, int]:
    """The template parameters of one workload: the shape, and the page size (decode, default 0:
    contiguous) or causal flag (prefill, default 1), given as arguments or named in the shape text
    (`...,page=16`), not both."""
    return workload_spec(name, shape, dtype, page=page, causal=causal).params


def workload_spec(name: str, shape, dtype: str = "bf16", *, page: int | None = None,
                  causal: int | None = None) -> AttentionWorkload:
    """The workload (operator `name`) as the api and the population name it; see attention_workload."""
    _check_name(name)
    page, causal = workload_options(shape, page, causal)
    if name == attention_prefill.NAME:
        if page:
            raise InvalidInput("page size", page, "0 (prefill reads a contiguous cache)")
        return AttentionWorkload(name, parse_shape(shape), dtype, causal=causal)
    if causal != 1:
        raise InvalidInput("causal", causal, "1 (decode attends to the whole cache)")
    return AttentionWorkload(name, parse_shape(shape), dtype, page=page)


def workload_options(shape, page: int | None = None, causal: int | None = None) -> tuple[int, int]:
    """(page, causal): each from the argument or the shape text (refused when both give it), else 0 and 1."""
    named = split_workload(shape)[1]
    for key, given in (("page", page), ("causal", causal)):
        if given is not None and key in named:
            raise InvalidInput(key, f"{given} and {key}={named[key]} in the shape", f"{key} given once")
    return (page if page is not None else named.get("page", 0)), (causal if causal is not None
                                                                    else named.get("causal", 1))


def sol(name: str, shape, dtype: str = "bf16", chip: str = "h200", *, causal: int | None = None) -> dict[str, Any]:
    """The speed-of-light floor (causal pairs counted for prefill), unit us, source sol."""
    s = parse_shape(shape)
    causal = workload_options(shape, None, causal)[1]
    if name == attention_prefill.NAME:
        fields = {"B": s["B"], "H": s["Hq"], "Hkv": s["Hkv"], "S": s["L"], "D": s["D"], "causal": causal}
    else:
        fields = {"B": s["B"], "H": s["Hq"], "Hkv": s["Hkv"], "L": s["L"], "D": s["D"]}
    r = sol_report(SOL_OPS[name], fields, dtype, chip)
    return {"floor_us": r.time_floor_s * 1e6, "compute_us": r.t_compute_s * 1e6, "memory_us": r.t_memory_s * 1e6,
            "flops": r.flops, "bytes": r.bytes, "bound": r.bound, "source": "sol"}


def solve(name: str, shape, *, chip: str = "h200", dtype: str = "bf16", solver: str = "milp", page: int | None = None,
          causal: int | None = None, calibration=None, time_limit: float | None = None) -> dict[str, Any]:
    """Solve the template for one workload: the chosen design, its modeled time and the SOL floor,
    with the fields every solve report has (formloop.api.solve): times in us from the model, the
    bound from the solver, the tied optima by enumeration."""
    return solve_template(template(name, dtype, calibration), shape, chip=chip, dtype=dtype, solver=solver, page=page,
                          causal=causal, time_limit=time_limit)


def solve_template(t, shape, *, chip: str = "h200", dtype: str = "bf16", solver: str = "milp",
                   page: int | None = None, causal: int | None = None, time_limit: float | None = None
                   ) -> dict[str, Any]:
    """`solve` for an attention template already built (formloop.api passes the store's calibration)."""
    name = t.name
    _check_name(name)
    if solver not in SOLVERS:
        raise InvalidInput("solver", solver, sorted(SOLVERS))
    wl = attention_workload(name, shape, dtype, page=page, causal=causal)
    f = t.formulate(wl, get_chip(chip))
    s = SOLVERS[solver](f, **({"time_limit": time_limit} if solver == "milp" and time_limit else {}))
    ties = s.ties if s.ties is not None else enumerate_designs(f).ties
    floor = sol(name, shape, dtype, chip, causal=wl.get("causal", 1))
    terms = {k: float(v) for k, v in s.terms.items()}
    return {"template": name, "template_hash": t.content_hash, "contract": CONTRACT, "chip": chip, "dtype": dtype,
            "shape": parse_shape(shape), "workload": wl, "calibration": t.options["calibration"],
            "solver": s.solver, "status": s.status.value, "design": dict(s.assignment),
            "objective_us": s.objective, "bound_us": s.bound, "gap": s.gap, "ties": len(ties),
            "bound_class": MODULES[name].bound_class(s.terms), "smem_bytes": int(terms["smem_bytes"]),
            "T_comp_us": terms["T_comp_us"], "T_mem_us": terms["T_mem_us"], "solve_seconds": s.seconds,
            "model": s.model.as_dict(), "sol": floor, "source": "model", "options": dict(t.options),
            "objective": s.objective, "unit": s.unit, "bound": s.bound, "feasible": s.feasible_count, "terms": terms,
            "seconds": s.seconds, "units": {"objective": f"{s.unit} (model)", "bound": f"{s.unit} (solver)",
                                            "seconds": "s (wall)", "sol.floor_us": "us (sol)"}}


def prove(name: str, *, dtype: str = "bf16", timeout_s: float = 10.0, calibration=None):
    """The template's certificate: K1, K3, the walks, the softmax chain, packing and paging."""
    if timeout_s <= 0:
        raise InvalidInput("timeout", timeout_s, "a positive number of seconds")
    return prove_template(template(name, dtype, calibration), timeout_s=timeout_s)


def measure_template(t, shape, *, chip: str = "h200", dtype: str = "bf16", solver: str = "milp",
                     page: int | None = None, causal: int | None = None, time_limit: float | None = None,
                     evaluator=None):
    """Solve an attention template already built, then measure the pick: gpu tier on a CUDA device (checked against
    the reference first), else the model tier, labelled as such; with the KV bandwidth (decode) or the tensor rate
    (prefill) the measured time implies. (the report, the Measurement); `evaluator` replaces the best available one
    (tests pass a synthetic gpu evaluator)."""
    report = solve_template(t, shape, chip=chip, dtype=dtype, solver=solver, page=page, causal=causal,
                            time_limit=time_limit)
    chip_spec = get_chip(chip)
    if evaluator is None:
        evaluator = best_available() if gpu_available() else ModelEvaluator()
    m = evaluator.evaluate(t, report["design"], report["workload"], chip_spec)
    report["measurement"] = m.as_dict()
    report["fallback"] = "" if m.tier == "gpu" else "no CUDA device here: the model tier (the template's cost)"
    if m.ok:
        report["rates"] = rates(t.name, report["shape"], m.latency_us, chip_spec, dtype,
                                causal=report["workload"].get("causal", 1), source=m.tier)
    return report, m


def rates(name: str, shape: Mapping[str, int], latency_us: float, chip, dtype: str = "bf16", *, causal: int = 1,
          source: str = "gpu") -> dict[str, Any]:
    """What `latency_us` implies: KV bytes per second (decode) or tensor FLOP/s (prefill), and the
    fraction of the chip's copy bandwidth or tensor peak."""
    s = dict(shape)
    e = DTYPE_BYTES[dtype]
    seconds = latency_us * 1e-6
    if name == attention_decode.NAME:
        kv = 2 * s["B"] * s["Hkv"] * s["L"] * s["D"] * e
        return {"kv_bytes": kv, "kv_tb_s": kv / seconds / 1e12, "copy_fraction": kv / seconds / chip.bandwidth,
                "source": source}
    floor = sol(name, s, dtype, chip.name, causal=causal)
    return {"flops": floor["flops"], "tflop_s": floor["flops"] / seconds / 1e12,
            "peak_fraction": floor["flops"] / seconds / chip.peak(dtype), "source": source}
