"""The validator: every rule between fields, checked before anything is compiled.

Rules of the language (arch gates, operand dtypes, alignment against dtype, layout and shape, the
epilogue's type and broadcast rules, pipeline stages) are here; the hardware walls are not
re-declared: the template's own constraints (shared memory of tile×stages on the target chip,
registers, split-K, row pitches, the row-in-tile rule) and its scope are evaluated over the
designs the spec's fixed fields leave, on the target chip's capacities. A wall no design can meet
is reported at the field that fixed it, with the values of that field that would meet it."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from formloop.dsl.diagnostics import Collector
from formloop.dsl.ir import ARCH_CHIPS, DECISION_OF, MENUS, TILE_DECISIONS, TMA_ARCHS, SpecIR
from formloop.expr import decisions_of, evaluate, grid_env, params_of
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.library import gemm_epilogue as family
from formloop.library import gemm_tiling_gpu as base
from formloop.library.gemm_epilogue_emit import aligned_extents
from formloop.library.gemm_epilogue_ops import chain_facts, chain_issues, chain_text, splits_epilogue
from formloop.template import Template

WALL_FIELDS = {"C1": ("stages", "tile"), "C2": ("warps", "tile"), "C3": ("warps", "tile"), "C4": ("split_k", "tile"),
               "C5": ("load", "shape"), "C6": ("load",), "E1": ("tile",), "E2": ("warps", "tile")}
SCOPE_FIELDS = {"row_fits": "shape", "glu_even": "shape"}
SHOWN = 8  # allowed values listed in a diagnostic before '...'


@dataclass(frozen=True)
class Validated:
    """A spec that passed every rule, with its template and what is left open."""

    spec: SpecIR
    template: Template
    chip: str
    open_decisions: tuple[str, ...]
    feasible_designs: int | None        # designs left by the fixed fields (None without a shape)
    walls_checked: tuple[str, ...]


def template_for(spec: SpecIR, calibration=None, calibration_id: str = "priors") -> Template:
    k = spec.kernel
    return get_template(family.NAME, dtype=k.a.dtype, out=k.c.dtype, epilogue=chain_text(k.chain),
                        calibration=calibration, calibration_id=calibration_id)


def workload_of(spec: SpecIR) -> dict[str, int] | None:
    """The template's workload parameters for the spec's shape (None when no shape is known)."""
    k, s = spec.kernel, spec.kernel.shape
    if s is None:
        return None
    pa = s.K if k.a.layout == "row" else s.M
    pb = s.N if k.b.layout == "row" else s.K
    return family.workload(s.M, s.N, s.K, k.a.dtype, batch_=s.batch, pa_=pa, pb_=pb, gather_=int(k.op == "conv2d"))


def validate(spec: SpecIR) -> Validated:
    """Check every rule; raise SpecError listing each broken one."""
    diag = Collector(spec.source)
    k = spec.kernel
    _arch_rules(spec, diag)
    _operand_rules(spec, diag)
    _chain_rules(spec, diag)
    _stage_rules(spec, diag)
    diag.raise_if_any()
    template = template_for(spec)
    walls, feasible = _walls(spec, template, diag)
    diag.raise_if_any()
    return Validated(spec, template, k.chip, k.open_decisions, feasible, walls)


def _arch_rules(spec: SpecIR, diag: Collector) -> None:
    k = spec.kernel
    if k.chip not in ARCH_CHIPS[k.arch]:
        diag.add(k.pos("chip"), "chip", k.chip, ARCH_CHIPS[k.arch], f"{k.chip} is not an {k.arch} chip")
    if k.pins.get("L") == 1 and k.arch not in TMA_ARCHS:
        diag.add(k.pos("load"), "load", "tma", ["ptr"], f"tensor-memory copies (TMA) need {' or '.join(TMA_ARCHS)}")
    if k.pins.get("L") == 1 and k.op == "conv2d":
        diag.add(k.pos("load"), "load", "tma", ["ptr"], "implicit GEMM gathers A's rows: pointer loads only")
    if k.open_decisions and k.chip not in base.CONTRACT_CHIPS:
        reported = set()
        for d in k.open_decisions:
            name = next((f for f, dec in DECISION_OF.items() if dec == d), "tile")
            if name in reported:
                continue
            reported.add(name)
            menu = "Tm x Tn x Tk from the menus" if name == "tile" else f"a fixed value from {list(MENUS[d])}"
            diag.add(k.pos(name), name, "?", menu,
                     f"open fields are solved by the cost model of {base.NAME}, which covers "
                     f"{', '.join(base.CONTRACT_CHIPS)}; {k.chip} is validated against its capacities only")


def _operand_rules(spec: SpecIR, diag: Collector) -> None:
    k = spec.kernel
    if k.b.dtype != k.a.dtype:
        diag.add(k.pos("b"), "b dtype", k.b.dtype, [k.a.dtype], "A and B meet in one tensor-core instruction")
    e = base.DTYPE_BYTES[k.a.dtype]
    if k.align is not None:
        if k.align * e > 16:
            diag.add(k.pos("align"), "align", k.align, [a for a in (1, 2, 4, 8) if a * e <= 16],
                     f"a vector load moves at most 16 bytes: {16 // e} elements of {k.a.dtype}")
        elif k.pins.get("L") == 1 and k.align * e < 16:
            diag.add(k.pos("align"), "align", k.align, [16 // e], "load = tma needs 16-byte aligned row pitches")
        if k.shape is not None:
            for name, extent in aligned_extents(k.kernel_spec(), k.shape).items():
                if extent % k.align:
                    diag.add(k.pos("align"), "align", k.align, [a for a in (1, 2, 4, 8) if extent % a == 0],
                             f"{name} = {extent} is not a multiple of {k.align}")
                    break
    if chain_facts(k.chain).reduces and k.c.layout != "row":
        diag.add(k.pos("c"), "c layout", k.c.layout, ["row"], "a row reduction writes one value per row (a vector)")


def _chain_rules(spec: SpecIR, diag: Collector) -> None:
    k = spec.kernel
    for issue in chain_issues(k.chain, k.c.dtype):
        diag.add(k.chain_where[issue.index], f"epilogue[{issue.index + 1}] {issue.field}", issue.value, issue.allowed,
                 issue.message)
    for i, op in enumerate(k.chain):
        if op.tensor_name in ("a", "b", "c", "ws", "cnt"):  # n becomes the kernel's n_ptr: a, b, c, ws, cnt are taken
            diag.add(k.chain_where[i], f"epilogue[{i + 1}] {op.kind} name", op.tensor_name,
                     "a name other than a, b, c (the operands), ws, cnt (the split-K workspace)")


def _stage_rules(spec: SpecIR, diag: Collector) -> None:
    k, seen = spec.kernel, set()
    for st in (*spec.pre, *spec.post):
        if st.tensor in seen:
            diag.add(st.pos, f"{st.kind} tensor", st.tensor, "one stage per tensor (a transpose may also convert)")
        seen.add(st.tensor)
        own = getattr(k, st.tensor)
        if st.kind == "cast" and st.dtype == own.dtype:
            diag.add(st.pos, "cast dtype", st.dtype, f"a dtype other than the kernel's {own.dtype}",
                     "this cast does nothing")
        if st.kind == "transpose" and k.op == "conv2d":
            diag.add(st.pos, "transpose", st.tensor, "cast (conv2d tensors are NHWC / KRSC, not matrices)")
        if st.dtype in ("tf32", "tf32x3") or (st.dtype is not None and own.dtype in ("tf32", "tf32x3")):
            diag.add(st.pos, f"{st.kind} dtype", st.dtype, f"fp32 on both sides of a {own.dtype} operand",
                     "tf32 and tf32x3 are fp32 storage")


def _walls(spec: SpecIR, template: Template, diag: Collector) -> tuple[tuple[str, ...], int | None]:
    """The template's walls over the designs the spec's fixed fields leave, on the target chip."""
    k = spec.kernel
    env = {**family.capacities(get_chip(k.chip)), "e": base.DTYPE_BYTES[k.a.dtype]}
    workload = workload_of(spec)
    if workload is not None:
        env.update(workload)
        before = len(diag.items)
        for c in template.scope:
            if set(params_of(c.expr)) <= set(env) and not bool(evaluate(c.expr, env)):
                where = SCOPE_FIELDS.get(c.name, "shape")
                diag.add(k.pos(where), f"{where} N", k.shape.N, c.doc, f"scope {c.name} of {template.name}")
        if len(diag.items) > before:
            return (), None
    names = [d.name for d in template.decisions]
    grid = grid_env(template.decisions)
    shape = tuple(len(MENUS[n]) for n in names)
    pinned = np.ones(shape, dtype=bool)
    for d, v in k.pins.items():
        pinned &= np.broadcast_to(grid[d] == v, shape)
    masks, checked, blamed = {}, [], set()
    for c in template.constraints:
        if not set(params_of(c.expr)) <= set(env):
            continue
        checked.append(c.name)
        masks[c.name] = np.broadcast_to(np.asarray(evaluate(c.expr, {**env, **grid}), dtype=bool), shape)
        if not (masks[c.name] & pinned).any():
            _blame(spec, template, c, masks[c.name], grid, names, env, diag, blamed)
    if diag.items:
        return tuple(checked), None
    joint = pinned.copy()
    for m in masks.values():
        joint &= m
    if not joint.any():
        conflict = _conflict(masks, pinned)
        diag.add(k.pos("kernel"), "configuration", _pins_text(k.pins), "a design meeting every wall",
                 f"no design meets {', '.join(conflict)} together with the fixed fields")
    return tuple(checked), int(joint.sum()) if workload is not None else None


def _blame(spec, template, c, mask, grid, names, env, diag, blamed: set) -> None:
    """A diagnostic at the first field that fixes a decision the wall reads, with the values of
    that field that meet the wall while every other fixed field stays as written (nearest first).
    One diagnostic per field: a second wall on the same field adds nothing the first did not say."""
    k = spec.kernel
    fields = WALL_FIELDS.get(c.name, ("tile",))
    reads = set(decisions_of(c.expr))
    for f in fields:
        decs = TILE_DECISIONS if f == "tile" else ((DECISION_OF[f],) if f in DECISION_OF else ())
        fixed = [d for d in decs if d in k.pins and d in reads]
        if f in blamed and (fixed or f == "shape"):
            return
        if f == "shape" and k.shape is not None:
            diag.add(k.pos("shape"), "shape", _shape_text(k), "a shape meeting " + c.doc,
                     f"{template.name} {c.name}: {c.doc}")
            blamed.add(f)
            return
        if not fixed:
            continue
        others = {d: v for d, v in k.pins.items() if d not in fixed}
        keep = mask.copy()
        for d, v in others.items():
            keep &= np.broadcast_to(grid[d] == v, mask.shape)
        axes = [names.index(d) for d in fixed]
        ok = np.argwhere(keep.any(axis=tuple(i for i in range(mask.ndim) if i not in axes)))
        allowed = sorted({tuple(MENUS[d][int(j)] for d, j in zip(fixed, row)) for row in ok},
                         key=lambda t: (sum(_distance(v, k.pins[d]) for d, v in zip(fixed, t)), t))
        allowed = [" x ".join(map(str, t)) for t in allowed]
        if not allowed and any(_pinned(g, k, reads) for g in fields[fields.index(f) + 1:]):
            continue  # nothing this field could take helps: blame the next one
        shown = allowed[:SHOWN] + (["..."] if len(allowed) > SHOWN else [])
        value = " x ".join(str(k.pins[d]) for d in fixed)
        label = f if len(fixed) == len(decs) and f != "tile" else f"{f} {' x '.join(fixed)}"
        diag.add(k.pos(f), label, value, shown or "none with the other fixed fields", _wall_text(c, k, env))
        blamed.add(f)
        return
    diag.add(k.pos("kernel"), "configuration", _pins_text(k.pins), "a design meeting " + c.name, _wall_text(c, k, env))


def _distance(value: float, pinned: float) -> float:
    """How far a menu value is from the pinned one: octaves for sizes, 0 or 1 for a flag (L, a 0 pin)."""
    return abs(math.log2(value / pinned)) if value > 0 and pinned > 0 else float(value != pinned)


def _pinned(f: str, k, reads) -> bool:
    if f == "shape":
        return k.shape is not None
    decs = TILE_DECISIONS if f == "tile" else ((DECISION_OF[f],) if f in DECISION_OF else ())
    return any(d in k.pins and d in reads for d in decs)


def _wall_text(c, k, env) -> str:
    detail = ""
    if c.name == "C1" and all(d in k.pins for d in ("Tm", "Tn", "Tk", "S")):
        need = evaluate(base.smem_bytes, {**env, **k.pins, "L": k.pins.get("L", 0)})
        detail = f": needs {int(need)} B of shared memory, {k.chip} allows {int(env['Ms'])} B per block"
    if c.name in ("C2", "E2") and all(d in k.pins for d in ("Tm", "Tn", "W")):
        facts = chain_facts(k.chain)
        held = facts.tiles / (2 if splits_epilogue(facts, k.pins["Tn"]) else 1)
        tiles = 1 + held if c.name == "E2" else 1
        per = int(k.pins["Tm"] * k.pins["Tn"] * tiles // (32 * k.pins["W"]))
        limit = env["epi_regs"] if c.name == "E2" else env["acc_regs"]
        detail = f": {per} fp32 values per thread, at most {int(limit)}"
    return f"wall {c.name} ({c.doc}){detail}"


def _conflict(masks: dict, pinned) -> list[str]:
    kept = list(masks)
    for name in list(masks):
        trial = [n for n in kept if n != name]
        joint = pinned.copy()
        for n in trial:
            joint &= masks[n]
        if not joint.any():
            kept = trial
    return kept or ["the fixed fields alone"]


def _pins_text(pins) -> str:
    return ", ".join(f"{d}={v}" for d, v in pins.items()) or "nothing fixed"


def _shape_text(k) -> str:
    s = k.shape
    return f"{s.batch} x {s.M} x {s.N} x {s.K}" if k.op == "batched_gemm" else f"{s.M} x {s.N} x {s.K}"


assert all(set(v) <= set(DECISION_OF) | {"tile", "shape"} for v in WALL_FIELDS.values())
