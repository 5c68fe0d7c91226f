"""Study files (TOML): a co-design study's hardware menus, programs (or a library template and its
scenarios), objectives, starts and search settings, validated field by field; `load_study` returns a
`Study` holding a `CoDesignProblem` or a `TemplateCoDesign`."""
from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from formloop.codesign import ventus_model as vm
from formloop.codesign.problem import CoDesignProblem, WallSpec
from formloop.codesign.template_problem import TemplateCoDesign
from formloop.errors import InvalidInput, UnknownName
from formloop.hw.libraries import get_library
from formloop.hw.library import ChipConfig, HardwareLibrary, check_menu
from formloop.library import get_template

KINDS = ("capacity", "table11")
PROGRAM_FIELDS = tuple(f.name for f in dataclasses.fields(vm.Program) if f.name not in ("name", "family"))


@dataclass
class Study:
    name: str
    kind: str
    problem: CoDesignProblem | TemplateCoDesign
    starts: dict[str, dict[str, ChipConfig]]          # start label -> objective -> chip
    k: int = 2
    rounds: int = 20
    band: float = 0.05
    random_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    random_budget: int | None = None
    seed_numbers: dict = field(default_factory=dict)  # the seed's table, for orientation
    path: str = ""


def ventus_walls() -> tuple[WallSpec, ...]:
    """Every resident warp holds one one-warp block: per-warp demand × warps <= the SM's capacity."""
    return (
        WallSpec("vreg", "vreg", lambda p, h: h["warps"] * vm.vregs(p), "vector registers of the resident warps fit"),
        WallSpec("sreg", "sreg", lambda p, h: h["warps"] * vm.sregs(p), "scalar registers of the resident warps fit"),
        WallSpec("smem", "smem_kib", lambda p, h: h["warps"] * vm.smem_bytes(p) / 1024,
                 "shared-memory staging of the resident blocks fits"),
    )


def read_toml(path: str | Path, what: str = "study file") -> dict:
    """A study file's TOML contents; a missing, non-UTF-8 or malformed file is a named error."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(what, str(path), "an existing TOML file")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidInput(what, str(path), f"a UTF-8 TOML file (byte {exc.start} is not UTF-8)") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(what, str(path), f"valid TOML ({exc})") from None


def load_study(path: str | Path) -> Study:
    study = parse_study(read_toml(path))
    study.path = str(path)
    return study


def parse_study(data: Mapping) -> Study:
    """A study file's contents as a `Study`: a program-menu problem over the Ventus model, or, with
    a `[template]` table, a library template whose walls are chip parameters (`TemplateCoDesign`)."""
    name = _get(data, "name", str)
    kind = _get(data, "kind", str)
    if kind not in KINDS:
        raise InvalidInput("kind", kind, KINDS)
    lib = _library(data)
    ref = _get(data, "reference", dict)
    ref_chip = _chip(lib, _get(ref, "chip", dict, {}, field_name="reference.chip"), "reference.chip")
    if not lib.fits(ref_chip):
        raise InvalidInput("reference.chip", ref_chip.label(lib.open_components()),
                           f"a chip within the area ceiling {lib.ceiling_mm2} mm2 (it needs {ref_chip.area:.4f} mm2)")
    lib = dataclasses.replace(lib, reference_values=ref_chip.as_dict())
    objectives = _get(data, "objectives", dict)
    search = _get(data, "search", dict, {})
    if "template" in data:
        problem = _template_problem(data, name, lib, objectives, search)
    else:
        problem = _program_problem(data, name, lib, ref, objectives)
    starts: dict[str, dict[str, ChipConfig]] = {}
    for label, per_obj in _get(data, "starts", dict, {}).items():
        if not isinstance(per_obj, dict):
            raise InvalidInput(f"starts.{label}", per_obj, "a table of objective = {component = value}")
        starts[label] = {}
        for obj, values in per_obj.items():
            where = f"starts.{label}.{obj}"
            if obj not in objectives:
                raise UnknownName(f"objective in starts.{label}", obj, sorted(objectives))
            h = _chip(lib, values, where)
            if not lib.fits(h):
                raise InvalidInput(where, h.label(lib.open_components()),
                                   f"a chip within the area ceiling {lib.ceiling_mm2} mm2 (it needs {h.area:.4f} mm2)")
            starts[label][obj] = h
    budget = search.get("random_budget")
    return Study(
        name=name, kind=kind, problem=problem, starts=starts,
        k=int(_get(search, "k", int, 2, field_name="search.k")),
        rounds=int(_get(search, "rounds", int, 20, field_name="search.rounds")),
        band=float(_get(search, "band", (int, float), 0.05, field_name="search.band")),
        random_seeds=tuple(_get(search, "random_seeds", list, [0, 1, 2, 3, 4], field_name="search.random_seeds")),
        random_budget=None if budget is None else int(budget),
        seed_numbers=_get(data, "seed", dict, {}),
    )


def _library(data: Mapping) -> HardwareLibrary:
    """The study's hardware library: the named library with the study's open menus, fixed values and ceiling."""
    base = get_library(_get(data, "library", str, "ventus"))
    hw = _get(data, "hardware", dict)
    open_menus = _get(hw, "open", dict, field_name="hardware.open")
    fixed = _get(hw, "fixed", dict, {}, field_name="hardware.fixed")
    for section, entries in (("hardware.open", open_menus), ("hardware.fixed", fixed)):
        for comp in entries:
            if comp not in base.component_names:
                raise UnknownName(f"component in {section}", comp, base.component_names)
    for comp, menu in open_menus.items():
        if not isinstance(menu, list):
            raise InvalidInput(f"hardware.open.{comp}", menu, "a list of numbers")
        check_menu(f"hardware.open.{comp}", menu)
    return base.restrict({k: tuple(v) for k, v in open_menus.items()}, fixed,
                         ceiling_mm2=_get(data, "ceiling_mm2", (int, float), base.ceiling_mm2))


def _program_problem(data: Mapping, name: str, lib: HardwareLibrary, ref: Mapping,
                     objectives: Mapping) -> CoDesignProblem:
    progs = _get(data, "programs", dict)
    programs: dict[str, list[dict]] = {}
    for family in ("prefill", "decode"):
        entries = progs.get(family)
        if not isinstance(entries, list) or not entries:
            raise InvalidInput(f"programs.{family}", entries if entries is not None else [], "at least one program")
        programs[family] = [_program(family, i, e) for i, e in enumerate(entries)]
        names = [p["name"] for p in programs[family]]
        if len(set(names)) != len(names):
            raise InvalidInput(f"programs.{family} names", names, "distinct names")
    for obj, scs in objectives.items():
        if not isinstance(scs, list) or not scs:
            raise InvalidInput(f"objectives.{obj}", scs, f"a non-empty list of scenarios from {sorted(vm.SCENARIOS)}")
        for sc in scs:
            if sc not in vm.SCENARIOS:
                raise UnknownName(f"scenario in objectives.{obj}", sc, sorted(vm.SCENARIOS))
    scenarios = {sc: vm.SCENARIOS[sc][0] for scs in objectives.values() for sc in scs}
    reference_programs = {}
    for sc, family in scenarios.items():
        prog = _get(ref, family, str, field_name=f"reference.{family}")
        if prog not in [p["name"] for p in programs[family]]:
            raise UnknownName(f"reference.{family}", prog, [p["name"] for p in programs[family]])
        reference_programs[sc] = prog
    model = _get(data, "model", dict, {})
    calibration = {t: float(v) for t, v in _get(model, "calibration", dict, {}, field_name="model.calibration").items()}
    for t in calibration:
        if t not in vm.TERMS:
            raise UnknownName("model.calibration term", t, vm.TERMS)
    return CoDesignProblem(
        name=name, library=lib, programs=programs, scenarios=scenarios,
        objectives={k: tuple(v) for k, v in objectives.items()}, walls=ventus_walls(), cost=vm.scenario_cost,
        terms=vm.TERMS, reference_programs=reference_programs, calibration=calibration,
    )


def _template_problem(data: Mapping, name: str, lib: HardwareLibrary, objectives: Mapping,
                      search: Mapping) -> TemplateCoDesign:
    """`[template]` names a library template and its options; `[scenarios.<name>]` gives each
    scenario's workload parameters (gemm-tiling: M, N, K and e, bytes per element); `search.inner`
    picks SOLVE's back end (milp or enumerate)."""
    spec = _get(data, "template", dict)
    template = get_template(_get(spec, "name", str, field_name="template.name"),
                            **_get(spec, "options", dict, {}, field_name="template.options"))
    wanted = [p.name for p in template.params if p.payload.kind == "workload"]
    scenarios = {}
    for sc, values in _get(data, "scenarios", dict).items():
        if not isinstance(values, dict):
            raise InvalidInput(f"scenarios.{sc}", values, f"a table of {', '.join(wanted)}")
        for k, v in values.items():
            if k not in wanted:
                raise UnknownName(f"workload parameter in scenarios.{sc}", k, wanted)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise InvalidInput(f"scenarios.{sc}.{k}", v, "a number")
        missing = [k for k in wanted if k not in values]
        if missing:
            raise InvalidInput(f"scenarios.{sc}", dict(values), f"a value for each of {', '.join(wanted)}",
                               fix=f"add {', '.join(missing)}")
        scenarios[sc] = dict(values)
    for obj, scs in objectives.items():
        if not isinstance(scs, list) or not scs:
            raise InvalidInput(f"objectives.{obj}", scs, f"a non-empty list of scenarios from {sorted(scenarios)}")
        for sc in scs:
            if sc not in scenarios:
                raise UnknownName(f"scenario in objectives.{obj}", sc, sorted(scenarios))
    return TemplateCoDesign(name=name, template=template, library=lib, scenarios=scenarios,
                            objectives={k: tuple(v) for k, v in objectives.items()},
                            solver=_get(search, "inner", str, "milp", field_name="search.inner"))


_MISSING = object()


def _get(d: Mapping, key: str, types, default=_MISSING, *, field_name: str | None = None):
    name = field_name or key
    if not isinstance(d, Mapping):
        raise InvalidInput(name.rsplit(".", 1)[0], d, "a table")
    if key not in d:
        if default is _MISSING:
            raise InvalidInput(name, None, f"a value of type {_type_names(types)}",
                               fix=f"add `{key}` to the study file")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, types):
        raise InvalidInput(name, v, f"a value of type {_type_names(types)}")
    return v


def _type_names(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join({"str": "string", "dict": "table", "list": "list", "int": "integer", "float": "number"}
                       .get(t.__name__, t.__name__) for t in types)


def _chip(lib, values: Mapping, where: str) -> ChipConfig:
    merged = lib.reference.as_dict()
    for comp, v in values.items():
        if comp not in lib.component_names:
            raise UnknownName(f"component in {where}", comp, lib.component_names)
        if v not in lib.component(comp).menu:
            raise InvalidInput(f"{where}.{comp}", v, list(lib.component(comp).menu))
        merged[comp] = v
    return lib.chip(**merged)


def _program(family: str, index: int, entry: Mapping) -> dict:
    where = f"programs.{family}[{index}]"
    if not isinstance(entry, Mapping) or "name" not in entry:
        raise InvalidInput(where, entry, "a table with a name and program fields")
    unknown = sorted(set(entry) - {"name", *PROGRAM_FIELDS})
    if unknown:
        raise UnknownName(f"field of {where}", unknown[0], ("name", *PROGRAM_FIELDS))
    for k, v in entry.items():
        if k != "name" and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise InvalidInput(f"{where}.{k}", v, "a non-negative integer")
    p = vm.Program(family=family, **entry)
    if p.pack not in (1, 2) or p.r < 1 or p.c < 1 or p.vec < 1 or p.unroll < 1:
        raise InvalidInput(where, dict(entry), "pack in {1, 2}; r, c, vec, unroll >= 1")
    return {"name": p.name, "family": family, **p.attrs()}
