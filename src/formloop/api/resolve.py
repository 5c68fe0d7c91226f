"""From the plain values a face passes to the objects the library works on: templates (library
names with options, or user files), chips, settings, the population. The Hopper routing lives
here, once: on an H100 or H200, `gemm-tiling` means the Triton family's contract (gemm-tiling-gpu),
whichever face asks; the attention templates are Triton families of the same contract.

Defaults live here too: a request that names no dtype or chip means the template's own (the
dtype its factory defaults to, the chip its descriptor names), else the illustrative chip and fp32."""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from formloop.errors import FormloopError, InvalidInput
from formloop.evaluate.calibrate import Calibration
from formloop.hw.chips import Chip, get_chip
from formloop.library import attention_service, gemm_tiling, gemm_tiling_gpu, get_template, template_factory
from formloop.library.user import file_origin, library_origin, load_user_template
from formloop.population import Population
from formloop.population import calibrations as stored
from formloop.settings import Settings, load_settings
from formloop.template import Template, bool_option

GPU_CONTRACT = gemm_tiling_gpu.CONTRACT
GENERIC_DTYPE = "fp32"
GENERIC_CHIP = "illustrative"
CALIBRATED = (gemm_tiling_gpu.NAME, *attention_service.TEMPLATES)
"""Templates whose efficiency terms a calibration JSON sets (the Triton families)."""


@dataclass(frozen=True)
class Candidate:
    """A template and where it can be loaded again (library:NAME?opts or file:PATH:NAME)."""

    template: Template
    origin: str


def is_user_spec(template: str) -> bool:
    return template.endswith(".py") or ".py:" in template


def template_from(template: str, options: Mapping[str, Any] | None = None, dtype: str | None = None) -> Candidate:
    """A library template by name (factory `options`; `dtype` too when the factory takes one and the
    options do not set it) or a user template path/to/file.py:NAME."""
    if not isinstance(template, str) or not template:
        raise InvalidInput("template", template, "a library template name or path/to/file.py:NAME")
    if options is not None and not isinstance(options, Mapping):
        raise InvalidInput("options", options, "an object of factory options, e.g. {\"pre\": \"exact\"}")
    if is_user_spec(template):
        if options:
            raise InvalidInput("options", dict(options), "none for a user template (its file fixes them)")
        return Candidate(load_user_template(template), file_origin(template))
    factory = template_factory(template)
    accepted = [p for p in inspect.signature(factory).parameters if p != "self"]
    opts = dict(options or {})
    for key in opts:
        if key not in accepted:
            raise InvalidInput(f"option of {template}", key, accepted or "none")
    if dtype is not None and "dtype" in accepted and "dtype" not in opts:
        opts["dtype"] = dtype
    t = factory(**opts)
    return Candidate(t, library_origin(template, dict(t.options)))


def default_dtype(template: str) -> str:
    """The element type a request for `template` means when it names none: the library factory's
    default (bf16 for the Triton families), else fp32 (user templates, factories without one)."""
    if not isinstance(template, str) or is_user_spec(template):
        return GENERIC_DTYPE
    try:
        param = inspect.signature(template_factory(template)).parameters.get("dtype")
    except FormloopError:  # an unknown name is refused where the template is loaded, with the known ones
        return GENERIC_DTYPE
    return param.default if param is not None and isinstance(param.default, str) else GENERIC_DTYPE


def default_chip(template: str) -> str:
    """The chip a request for `template` means when it names none: the one its descriptor names
    (its contract's proof chip, for the Triton families), else the illustrative chip."""
    if not isinstance(template, str) or is_user_spec(template):
        return GENERIC_CHIP
    try:
        return str(get_template(template).descriptor.get("chip", GENERIC_CHIP))
    except FormloopError:
        return GENERIC_CHIP


def chip_from(name: str) -> Chip:
    if not isinstance(name, str):
        raise InvalidInput("chip", name, "a chip name, e.g. illustrative or h200")
    return get_chip(name)


def settings_from(settings: Settings | None) -> Settings:
    return settings if settings is not None else load_settings()


def open_population(settings: Settings | None = None) -> Population:
    """The store to write to (created when missing)."""
    s = settings_from(settings)
    return Population(s.store_path, busy_timeout_ms=s.busy_timeout_ms)


def read_population(settings: Settings | None = None) -> tuple[Population, str]:
    """The store to read, and its path: a missing file reads as an empty store and is not created."""
    s = settings_from(settings)
    if not Path(s.store_path).exists():
        return Population(":memory:"), str(s.store_path)
    return Population(s.store_path, busy_timeout_ms=s.busy_timeout_ms, mode="read"), str(s.store_path)


# -- the Hopper routing --------------------------------------------------------------------------

@dataclass(frozen=True)
class Routed:
    """The template a request resolves to on a chip, the contract it is solved under, and what a
    report adds about it (the calibration of the GPU contract)."""

    candidate: Candidate
    contract: str
    extra: Mapping[str, Any] = field(default_factory=dict)


def is_hopper(chip: str) -> bool:
    return isinstance(chip, str) and chip.lower() in gemm_tiling_gpu.CONTRACT_CHIPS


def route(template: str, options: Mapping[str, Any] | None, chip: str, dtype: str,
          calibration: str | None = None, settings: Settings | None = None) -> Routed:
    """The template `template` names on `chip`: gemm-tiling on a Hopper chip is gemm-tiling-gpu
    (the Triton family's decisions and cost model); anything else is itself."""
    opts = dict(options or {})
    if template == gemm_tiling.NAME and is_hopper(chip):
        pre = opts.pop("pre", "exact")
        if pre != "exact":
            raise InvalidInput(f"contract (--pre) with --chip {chip}", pre, ["exact"],
                               fix="the Triton family's schedule is fixed (P = S-1, beta = 1)")
        if opts.pop("dtype", dtype) != dtype or opts:
            raise InvalidInput(f"options of {gemm_tiling.NAME} with --chip {chip}", dict(options or {}),
                               "pre=exact only (the dtype is the workload's)")
        return gpu_contract(dtype, calibration, chip=chip, settings=settings)
    if template in CALIBRATED:
        return gpu_contract(opts.pop("dtype", dtype), calibration, opts, name=template, chip=chip, settings=settings)
    if calibration is not None:
        raise InvalidInput("calibration", calibration, f"none for {template}",
                           fix=f"a calibration applies to {', '.join(CALIBRATED)} (gemm-tiling on h200 or h100)")
    c = template_from(template, opts, dtype)
    return Routed(c, str(c.template.options.get("pre", "")))


PRIORS = ("prior", "priors")
"""--calibration values that ask for the template's priors even where the store holds a calibration."""


def gpu_contract(dtype: str, calibration: str | None = None, options: Mapping[str, Any] | None = None,
                 name: str = gemm_tiling_gpu.NAME, chip: str | None = None,
                 settings: Settings | None = None) -> Routed:
    """Triton family `name` (default gemm-tiling-gpu) for `dtype`: with a calibration JSON if given,
    else with the store's latest calibration of (name, dtype, chip), else with its priors. The
    report's `calibration_source` says which: 'calibrated <date> (...)', a JSON file, or 'prior'."""
    opts = dict(options or {})
    sched = _schedules_option(opts.pop("schedules")) if name == gemm_tiling_gpu.NAME and "schedules" in opts else None
    if opts:
        raise InvalidInput(f"options of {name}", dict(options or {}), "dtype only (and --calibration"
                           + (", schedules=true|false)" if name == gemm_tiling_gpu.NAME else ")"))
    extra = {} if sched is None else {"schedules": sched}  # gemm-tiling-gpu's schedule decision SC (off by default)
    if calibration is None and chip is not None:
        found, why = stored_calibration(name, dtype, chip, settings)
        if found is not None:
            c = template_from(name, {**extra, "dtype": dtype, "calibration": dict(found.terms),
                                     "calibration_id": found.key})
            return Routed(c, GPU_CONTRACT, {"calibration": found.key, "calibration_source": found.describe()})
        c = template_from(name, {**extra, "dtype": dtype})
        return Routed(c, GPU_CONTRACT, {"calibration": "priors", "calibration_source": f"{stored.PRIOR_LABEL} ({why})"})
    if calibration is None or calibration in PRIORS:
        c = template_from(name, {**extra, "dtype": dtype})
        return Routed(c, GPU_CONTRACT, {"calibration": "priors", "calibration_source": stored.PRIOR_LABEL})
    path = Path(calibration)
    if not path.is_file():
        raise InvalidInput("calibration", calibration, "a calibration JSON written by benchmarks/gemm.py or "
                                                       "benchmarks/attention.py, or 'prior'")
    try:
        cal = Calibration.load(path)
    except (ValueError, TypeError, AttributeError, OSError) as exc:  # not JSON, not UTF-8, wrong or missing fields
        raise InvalidInput("calibration", calibration, "a calibration JSON written by benchmarks/gemm.py or "
                           f"benchmarks/attention.py ({type(exc).__name__}: {str(exc)[:120]})") from None
    c = template_from(name, {**extra, "dtype": dtype, "calibration": cal.values, "calibration_id": cal.key})
    return Routed(c, GPU_CONTRACT, {"calibration": cal.key, "calibration_source": f"file {path.name}"})


def _schedules_option(value: Any) -> bool:
    return bool_option("option schedules of gemm-tiling-gpu", value)


def stored_calibration(name: str, dtype: str, chip: str, settings: Settings | None = None
                       ) -> tuple[stored.StoredCalibration | None, str]:
    """The store's latest calibration of (name, dtype, chip), or None and why there is none."""
    s = settings_from(settings)
    if not Path(s.store_path).exists():
        return None, "no store yet"
    try:
        with Population(s.store_path, busy_timeout_ms=s.busy_timeout_ms, mode="read") as pop:
            if not stored.has_tables(pop):
                return None, f"store schema {pop.schema_version} holds no calibrations"
            found = stored.latest(pop, name, dtype, chip)
    except FormloopError as exc:
        return None, f"store unreadable: {str(exc).splitlines()[0][:120]}"
    return found, "" if found else f"no calibration of {name} {dtype} on {chip} in the store"
