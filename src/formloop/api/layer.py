"""`formloop layer MODEL --scenario prefill:N|decode:H ...`: plan a whole decoder layer per scenario
(each part's design from its template, the fusion by the qwen3-layer MILP), report the model times,
and on a CUDA device measure the plan (correctness against the fp32 reference first).

Every time says its unit and source in its key or in `units`: model (the templates' costs), sol
(speed-of-light floors), gpu (measured by formloop.measure.timer)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from formloop.api.resolve import stored_calibration
from formloop.api.values import plain
from formloop.errors import InvalidInput
from formloop.evaluate import gpu_available
from formloop.hw.chips import get_chip
from formloop.library import attention_service
from formloop.library.qwen3_layer import get_model, parse_scenario
from formloop.library.qwen3_layer_plan import layer_floor, plan_many
from formloop.population.calibrations import PRIOR_LABEL
from formloop.settings import Settings
from formloop.template import bool_option

MEASURE = ("auto", "yes", "no")


def layer(model: str, scenarios: Sequence[str], *, chip: str = "h200", measure: str = "auto",
          workers: int = 4, norm_fusion: bool = False, tune: int = 0, settings: Settings | None = None,
          rope_fusion: bool = False) -> dict[str, Any]:
    """Plan (and with a GPU, measure) the layer of `model` for each scenario; `norm_fusion`: the layer
    template's option (decode may run the two RMSNorms inside the QKV and GateUp GEMVs, decision NF); `rope_fusion`:
    its option RA (decode attention may take the q/k norm + RoPE + KV write inside); `tune`:
    on a GPU, time each GEMM part's and the attention's plan design against its family's next `tune` designs alone
    and launch the fastest where it is >= 3 % faster (formloop.library.qwen3_layer_tune) before measuring the layer.
    Attention is solved with the store's latest calibration of its family on `chip` where there is one, else its
    priors (`calibrations` says which)."""
    cfg = get_model(model)
    if isinstance(scenarios, str):
        scenarios = [scenarios]
    if not scenarios:
        raise InvalidInput("scenario", [], "at least one of prefill:N, decode:H")
    parsed = [parse_scenario(s) for s in scenarios]
    get_chip(chip)
    if measure not in MEASURE:
        raise InvalidInput("measure", measure, MEASURE)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidInput("workers", workers, "a whole number >= 1")
    norm_fusion = bool_option("norm_fusion", norm_fusion)
    rope_fusion = bool_option("rope_fusion", rope_fusion)
    if isinstance(tune, bool) or not isinstance(tune, int) or tune < 0:
        raise InvalidInput("tune", tune, "a whole number >= 0 (candidate designs timed per GEMM part)")
    on_gpu = gpu_available()
    if measure == "yes" and not on_gpu:
        raise InvalidInput("measure", measure, "auto or no (no CUDA device here)")
    if tune and not (on_gpu and measure != "no"):
        raise InvalidInput("tune", tune, "0 here: tuning times designs on a CUDA device (none here, or measure=no)")
    rows = []
    found = {name: stored_calibration(name, cfg.dtype, chip, settings) for name in attention_service.TEMPLATES}
    terms = {name: dict(c.terms) for name, (c, _) in found.items() if c is not None}
    calibrations = {name: c.describe() if c is not None else f"{PRIOR_LABEL} ({why})" for name, (c, why) in
                    found.items()}
    for sc, p in zip(parsed, plan_many(cfg, parsed, chip, model, workers, norm_fusion=norm_fusion,
                                       attention_calibration=terms, rope_fusion=rope_fusion)):
        tuned = None
        if tune:
            from formloop.library.qwen3_layer_tune import tune_attention, tune_gemms  # noqa: PLC0415 (torch)

            p, tuned = tune_gemms(p, "cuda", tune)
            p, tuned["attn"] = tune_attention(p, "cuda", tune)
        row = p.as_dict()
        row["sol"] = layer_floor(cfg, sc, chip)
        if tuned is not None:
            row["tuned"] = tuned
        if on_gpu and measure != "no":
            from formloop.library.qwen3_layer_measure import measure as measure_plan  # noqa: PLC0415 (torch)

            row["measured"] = measure_plan(p, chip=chip)
        else:
            row["measured"] = None
        rows.append(row)
    return plain({"model": model, "config": cfg.as_dict(), "chip": chip, "scenarios": rows,
                  "calibrations": calibrations,
                  "measured_note": "" if on_gpu and measure != "no" else "no CUDA device here (or measure=no): "
                                                                           "model times only",
                  "units": {"model_us": "us (model)", "sol.floor_us": "us (sol)", "measured.graph_us": "us (gpu)",
                            "measured.eager_us": "us (gpu)"}})
