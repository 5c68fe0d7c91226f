"""The hardware library: chip components, each with a menu and an area model, and an area ceiling.

A chip drawn from a library (`ChipConfig`) is a value: one menu entry per component. `h + e(i)`
moves component i to its next menu value and `h - e(i)` to its previous one; steps add and scale
(`2 * lib.e("vreg") + lib.e("sreg")`). Moving past either end of a menu is an error, never a clamp.

Area model (mm²): for each component, value × (logic per unit + storage KiB per unit × density of
its storage kind), times the SM count for per-SM components, plus a fixed uncore. The densities:

  sram  0.0005 mm²/KiB — a 7 nm high-density 6T bitcell of 0.027 µm² (S.-Y. Wu et al., IEDM 2016,
        TSMC N7) is 0.00022 mm² per KiB of bitcells; CACTI 6.0 (Muralimanohar et al., HPL-2009-85)
        style periphery (decoders, sense amplifiers, redundancy) puts array efficiency near 45%.
  cache ×1.1 of sram for tags and replacement state.
  rf    ×1.5 of sram: GPU register files are banked single-ported SRAM behind operand collectors
        (Gebhart et al., ISCA 2011); the factor covers banking and crossbar.
  flop  ×8 of sram: small scalar files built from flip-flops/latches (standard-cell storage).

Logic coefficients (SIMT core, warp slots, queue entries, tensor MACs, memory interface, uncore)
are our stated assumptions at 7 nm, not a synthesis run: they set the scale so that the Ventus-like
reference chip of seed 000 §5.5 sits below its 1.11 mm² ceiling with room to buy capacity.

A configuration yields a `Chip` (`ChipConfig.chip`): the library names a registered base chip, and
each component the `Chip` fields it sets (`chip_fields`: field, factor per unit of the component;
`peak_flops.<precision>` sets one peak rate). So a library template reads a configuration's
capacities through its own `bind_chip`, exactly as it reads a datasheet chip, and co-design can
move the template's walls by moving components.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from numbers import Real

from formloop.errors import InvalidInput, StructureError, UnknownName
from formloop.hw.chips import Chip, get_chip

SRAM_MM2_PER_KIB = 0.0005
DENSITY = {"none": 0.0, "sram": SRAM_MM2_PER_KIB, "cache": 1.1 * SRAM_MM2_PER_KIB,
           "rf": 1.5 * SRAM_MM2_PER_KIB, "flop": 8.0 * SRAM_MM2_PER_KIB}


@dataclass(frozen=True)
class Component:
    """One configurable chip resource. `menu` is sorted ascending; area is per unit of value."""

    name: str
    unit: str
    menu: tuple[Real, ...]
    per_sm: bool
    logic_mm2: float = 0.0          # logic area per unit of value
    storage_kib: float = 0.0        # storage per unit of value, KiB
    storage: str = "none"           # density class of that storage (see DENSITY)
    doc: str = ""
    chip_fields: tuple[tuple[str, float], ...] = ()   # (Chip field, factor per unit) this component sets

    def __post_init__(self) -> None:
        check_menu(f"menu of {self.name}", self.menu)
        if self.storage not in DENSITY:
            raise InvalidInput(f"storage kind of {self.name}", self.storage, sorted(DENSITY))
        if self.logic_mm2 < 0 or self.storage_kib < 0:
            raise InvalidInput(f"area coefficients of {self.name}", (self.logic_mm2, self.storage_kib),
                               "non-negative numbers")
        for name, factor in self.chip_fields:
            if name not in CHIP_FIELDS and not name.startswith("peak_flops."):
                raise InvalidInput(f"chip field of component {self.name}", name,
                                   [*sorted(CHIP_FIELDS), "peak_flops.<precision>"])
            if not factor > 0:
                raise InvalidInput(f"factor of chip field {name} of component {self.name}", factor, "a positive number")

    @property
    def mm2_per_unit(self) -> float:
        return self.logic_mm2 + self.storage_kib * DENSITY[self.storage]

    def area(self, value: Real, sm_count: int) -> float:
        return float(value) * self.mm2_per_unit * (sm_count if self.per_sm else 1)


# Chip fields a component may set: the numbers a template's bind_chip reads (names, menus and
# notes stay the base chip's).
CHIP_FIELDS = frozenset({"sm_count", "mem_bandwidth", "smem_per_block", "smem_per_sm", "registers_per_sm",
                         "registers_per_block", "l2_bytes", "accumulators_per_block", "barrier_cycles",
                         "l1_per_sm", "warps_per_sm", "registers_per_thread"})


def check_menu(field_name: str, menu: Sequence) -> None:
    """A menu is non-empty, numeric, positive-or-zero and strictly ascending."""
    if not menu:
        raise InvalidInput(field_name, list(menu), "a non-empty list of numbers")
    for v in menu:
        if isinstance(v, bool) or not isinstance(v, Real) or v < 0:
            raise InvalidInput(field_name, list(menu), "numbers >= 0")
    if any(b <= a for a, b in zip(menu, menu[1:])):
        raise InvalidInput(field_name, list(menu), "values sorted strictly ascending",
                           fix=f"write it as {sorted(set(menu))}")


@dataclass(frozen=True)
class Step:
    """A move in menu positions: component name -> signed number of menu steps."""

    moves: tuple[tuple[str, int], ...]

    def __add__(self, other: "Step") -> "Step":
        out = dict(self.moves)
        for k, t in other.moves:
            out[k] = out.get(k, 0) + t
        return Step(tuple(sorted((k, t) for k, t in out.items() if t)))

    def __rmul__(self, t: int) -> "Step":
        return Step(tuple((k, v * t) for k, v in self.moves))

    def __neg__(self) -> "Step":
        return (-1) * self


@dataclass(frozen=True)
class ChipConfig:
    """A chip: one menu value per library component. Equal values are equal chips."""

    values: tuple[tuple[str, Real], ...]
    library: "HardwareLibrary" = field(compare=False, hash=False, repr=False)

    def __getitem__(self, name: str) -> Real:
        for k, v in self.values:
            if k == name:
                return v
        raise UnknownName("chip component", name, [k for k, _ in self.values])

    def as_dict(self) -> dict[str, Real]:
        return dict(self.values)

    def with_values(self, **values: Real) -> "ChipConfig":
        return self.library.chip(**{**self.as_dict(), **values})

    def moved(self, step: Step) -> "ChipConfig":
        new = self.as_dict()
        for name, t in step.moves:
            comp = self.library.component(name)
            pos = comp.menu.index(self[name]) + t
            if not 0 <= pos < len(comp.menu):
                raise InvalidInput(f"step of {name} from {self[name]}", t,
                                   f"a move that stays within the menu {list(comp.menu)}")
            new[name] = comp.menu[pos]
        return self.library.chip(**new)

    def can_move(self, step: Step) -> bool:
        for name, t in step.moves:
            comp = self.library.component(name)
            if not 0 <= comp.menu.index(self[name]) + t < len(comp.menu):
                return False
        return True

    @property
    def chip(self) -> Chip:
        """This configuration as a `Chip` (the library's base chip with its components' fields set)."""
        return self.library.chip_spec(self)

    def __add__(self, step: Step) -> "ChipConfig":
        return self.moved(step)

    def __sub__(self, step: Step) -> "ChipConfig":
        return self.moved(-step)

    @property
    def area(self) -> float:
        return self.library.area(self)

    def describe(self, names: Sequence[str] | None = None) -> str:
        names = names or [k for k, _ in self.values]
        return ", ".join(f"{n}={self[n]:g}" for n in names)

    def label(self, names: Sequence[str] | None = None) -> str:
        names = names or [k for k, _ in self.values]
        return "/".join(f"{self[n]:g}" for n in names)


@dataclass(frozen=True)
class HardwareLibrary:
    """Components with menus and an area model, an area ceiling and a reference chip."""

    name: str
    components: tuple[Component, ...]
    ceiling_mm2: float
    uncore_mm2: float
    reference_values: Mapping[str, Real]
    sm_component: str = "sm"
    source: str = ""
    base_chip: str = ""             # registered chip whose other fields a configuration's Chip keeps

    def __post_init__(self) -> None:
        names = [c.name for c in self.components]
        if len(set(names)) != len(names):
            raise StructureError(f"library {self.name} declares a component twice: {names}")
        if self.sm_component not in names:
            raise StructureError(f"library {self.name} has no SM-count component {self.sm_component!r}")
        fields = [f for c in self.components for f, _ in c.chip_fields]
        twice = sorted({f for f in fields if fields.count(f) > 1})
        if twice:
            raise StructureError(f"library {self.name}: chip fields {twice} are set by more than one component")
        if fields and not self.base_chip:
            raise StructureError(f"library {self.name} sets chip fields but names no base chip")
        self.chip(**self.reference_values)  # the reference must be a valid chip

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise UnknownName("component", name, [c.name for c in self.components])

    @property
    def component_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.components)

    def chip(self, **values: Real) -> ChipConfig:
        """The chip with these component values (every component named, every value on its menu)."""
        for k in values:
            self.component(k)
        out = []
        for c in self.components:
            if c.name not in values:
                raise InvalidInput(f"chip component {c.name}", None, list(c.menu),
                                   fix="give a value for every component")
            v = values[c.name]
            if v not in c.menu:
                raise InvalidInput(f"chip component {c.name}", v, list(c.menu))
            out.append((c.name, v))
        return ChipConfig(tuple(out), self)

    @property
    def reference(self) -> ChipConfig:
        return self.chip(**self.reference_values)

    def e(self, name: str) -> Step:
        """The unit step e_i: one menu position up on component `name`."""
        self.component(name)
        return Step(((name, 1),))

    def chip_spec(self, h: ChipConfig) -> Chip:
        """The `Chip` of configuration `h`: the base chip with each component's fields set."""
        if not self.base_chip:
            raise StructureError(f"library {self.name} names no base chip", fix="set base_chip to a registered chip")
        base = get_chip(self.base_chip)
        fields: dict[str, Real] = {}
        peaks = dict(base.peak_flops)
        for c in self.components:
            for name, factor in c.chip_fields:
                value = h[c.name] * factor
                if name.startswith("peak_flops."):
                    peaks[name.split(".", 1)[1]] = float(value)
                elif isinstance(getattr(base, name), int):
                    if not float(value).is_integer():
                        raise InvalidInput(f"{name} of {c.name}={h[c.name]:g} (x{factor:g})", value, "a whole number")
                    fields[name] = int(value)
                else:
                    fields[name] = float(value)
        open_names = self.open_components()
        return replace(base, **fields, peak_flops=peaks, components=h.as_dict(),
                       name=f"{self.name}[{h.describe(open_names)}]" if open_names else base.name,
                       source=f"hardware library {self.name} over base chip {base.name}: {self.source}")

    def area_of(self, values: Mapping[str, object]) -> object:
        """Area (mm²) of component values: numbers, or expressions over chip decisions (the joint MILP)."""
        total = self.uncore_mm2
        for c in self.components:
            total = total + values[c.name] * c.mm2_per_unit * (values[self.sm_component] if c.per_sm else 1)
        return total

    def area_breakdown(self, h: ChipConfig) -> dict[str, float]:
        sm = int(h[self.sm_component])
        out = {c.name: c.area(h[c.name], sm) for c in self.components}
        out["uncore"] = self.uncore_mm2
        return out

    def area(self, h: ChipConfig) -> float:
        return sum(self.area_breakdown(h).values())

    def fits(self, h: ChipConfig) -> bool:
        return self.area(h) <= self.ceiling_mm2 + 1e-12

    def restrict(self, menus: Mapping[str, Sequence[Real]], fixed: Mapping[str, Real] = (),
                 ceiling_mm2: float | None = None) -> "HardwareLibrary":
        """The library a study searches: components in `menus` are open over those menus; every
        other component is pinned to its `fixed` value, or else to the reference value. The
        reference keeps its values where they remain on the menus, else takes the menu's first."""
        fixed = dict(fixed)
        for k in [*menus, *fixed]:
            self.component(k)
        both = set(menus) & set(fixed)
        if both:
            raise InvalidInput("components both open and fixed", sorted(both), "each component in one of the two")
        comps = []
        for c in self.components:
            if c.name in menus:
                menu = tuple(menus[c.name])
                check_menu(f"menu of {c.name}", menu)
                comps.append(replace(c, menu=menu))
            else:
                value = fixed.get(c.name, self.reference_values[c.name])
                check_menu(f"fixed value of {c.name}", (value,))
                comps.append(replace(c, menu=(value,)))
        ref = {}
        for c in comps:
            v = self.reference_values[c.name]
            ref[c.name] = v if v in c.menu else c.menu[0]
        ceiling = self.ceiling_mm2 if ceiling_mm2 is None else ceiling_mm2
        if isinstance(ceiling, bool) or not isinstance(ceiling, Real) or not ceiling > 0:
            raise InvalidInput("area ceiling (mm2)", ceiling_mm2, "a positive number")
        return replace(self, components=tuple(comps), reference_values=ref, ceiling_mm2=float(ceiling))

    def open_components(self) -> tuple[str, ...]:
        """Components with more than one menu value (the chip decisions)."""
        return tuple(c.name for c in self.components if len(c.menu) > 1)

    def chips(self, within_ceiling: bool = True) -> list[ChipConfig]:
        """Every chip over the menus (open components vary), in menu order."""
        import itertools

        grid = itertools.product(*(c.menu for c in self.components))
        out = [self.chip(**dict(zip(self.component_names, vals))) for vals in grid]
        return [h for h in out if self.fits(h)] if within_ceiling else out
