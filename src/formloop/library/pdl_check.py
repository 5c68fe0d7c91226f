"""Programmatic dependent launch as text: the prologue the GEMM emitter writes, and the structural
checks of pdl.py's rules on a kernel's Triton source and on its compiled PTX.

Rules (pdl.py): before the wait a kernel reads only pointers no earlier kernel of the step writes
(`read_only`: weights, tables), stores nothing, calls nothing that might (any call not known to be
free of memory accesses); the wait runs in every program (not under a data-dependent branch, not in
a loop). The source check follows the kernel's statements in order, resolving `if` on constexprs it
is given (PDL, INTERPRET, ...); a local's pointer parameters are tracked through assignments. The PTX
check reads the compiled entry function: nothing before `griddepcontrol.wait` but register, param and
constant work, `prefetch` and `griddepcontrol.launch_dependents`; no branch and no predicate on the wait.
A violation names the kernel, the line and the statement (or PTX instruction). No triton needed."""
from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

WAITS = ("pdl_wait", "gdc_wait")
TRIGGERS = ("pdl_launch_dependents", "gdc_launch_dependents")
LOADS = ("load", "l2_prefetch")
STORES = ("store", "atomic_add", "atomic_xchg", "atomic_cas", "atomic_max", "atomic_min", "atomic_and",
          "atomic_or", "atomic_xor", "inline_asm_elementwise", "device_print", "device_assert")
# helpers of the kernels that compute indices only (no memory access)
PURE_HELPERS = ("_tile_of", "range", "min", "max", "int", "float", "len")


def gemm_prologue(prefetch: bool) -> list[str]:
    """The GEMM's programmatic-dependent prologue (emitted after the tile's rm/rn): let the next
    kernel be scheduled, start the stream of B -- the weight, which no earlier kernel of the chain
    writes -- into the L2 (the first PF_SPAN columns of each of the tile's rows in its k split, one
    prefetch per line of PF_LINE elements), then wait for the kernel before; A, the chain's tensors
    and every store come after. `prefetch` only where B is stored by rows ([N, K], a linear layer's
    weight): a row of B is then one contiguous run of k."""
    out = ["pdl_launch_dependents()"]
    if prefetch:
        out += ["if PF_SPAN > 0:",
                "    pf_k = tl.maximum(tl.minimum(k_lo + tl.arange(0, PF_SPAN // PF_LINE) * PF_LINE,"
                " tl.minimum(K, k_lo + per_split * BLOCK_K) - 1), 0)",
                "    l2_prefetch(b_raw + bid64 * stride_bb + (rn % N).to(tl.int64)[:, None] * stride_b"
                " + pf_k[None, :])"]
    return out + ["pdl_wait()"]


@dataclass(frozen=True)
class Violation:
    kernel: str
    line: int
    what: str
    text: str

    def __str__(self) -> str:
        return f"{self.kernel}:{self.line}: {self.what}: {self.text}"


class PdlViolation(AssertionError):
    """A kernel launched as a programmatic dependent breaks pdl.py's rules (each violation listed)."""

    def __init__(self, violations: Iterable[Violation]):
        self.violations = list(violations)
        super().__init__("PDL rules broken:\n  " + "\n  ".join(map(str, self.violations)))


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class _Walker:
    def __init__(self, name: str, src_lines: list[str], constexprs: Mapping[str, object], pointers: set[str],
                 read_only: set[str], line0: int):
        self.name, self.lines, self.consts = name, src_lines, dict(constexprs)
        self.taint = {p: {p} for p in pointers}  # name -> the pointer parameters it derives from
        self.read_only, self.line0 = read_only, line0
        self.waited = False
        self.out: list[Violation] = []

    def flag(self, node, what: str) -> None:
        line = getattr(node, "lineno", 1)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        self.out.append(Violation(self.name, line + self.line0, what, text))

    def const(self, test):
        """The value of an `if` test made of the given constexprs (None when it is not)."""
        if isinstance(test, ast.Name) and test.id in self.consts:
            return bool(self.consts[test.id])
        if isinstance(test, ast.Constant):
            return bool(test.value)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            v = self.const(test.operand)
            return None if v is None else not v
        if isinstance(test, ast.BoolOp):
            vals = [self.const(v) for v in test.values]
            if isinstance(test.op, ast.And):
                return False if False in vals else (None if None in vals else True)
            return True if True in vals else (None if None in vals else False)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
                and test.left.id in self.consts and isinstance(test.comparators[0], ast.Constant):
            a, b, op = self.consts[test.left.id], test.comparators[0].value, test.ops[0]
            table = {ast.Gt: a > b, ast.GtE: a >= b, ast.Lt: a < b, ast.LtE: a <= b, ast.Eq: a == b,
                     ast.NotEq: a != b}
            return table.get(type(op))
        return None

    def pointers_of(self, node) -> set[str]:
        return set().union(*(self.taint.get(n, set()) for n in _names(node)))

    def block(self, stmts, guarded: bool) -> None:
        for st in stmts:
            self.stmt(st, guarded)

    def stmt(self, st, guarded: bool) -> None:
        if isinstance(st, ast.If):
            v = self.const(st.test)
            if v is not None:
                self.block(st.body if v else st.orelse, guarded)
                return
            if not self.waited:
                self.expr(st.test, guarded)
            self.block(st.body, True)
            self.block(st.orelse, True)
            return
        if isinstance(st, (ast.For, ast.While)):
            if not self.waited:
                self.expr(st.iter if isinstance(st, ast.For) else st.test, guarded)
            self.block(st.body, True)
            return
        if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and not self.waited:
            value = st.value
            if value is not None:
                self.expr(value, guarded)
                src = self.pointers_of(value)
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                for t in targets:
                    for n in _names(t):
                        self.taint[n] = (self.taint.get(n, set()) if isinstance(st, ast.AugAssign) else set()) | src
            return
        if isinstance(st, ast.Return) and not self.waited:
            self.flag(st, "return before the wait (this program would not wait)")
            return
        for node in ast.iter_child_nodes(st):
            if isinstance(node, ast.expr):
                self.expr(node, guarded)

    def expr(self, node, guarded: bool) -> None:
        for call in [n for n in ast.walk(node) if isinstance(n, ast.Call)]:
            name = _call_name(call)
            if name in WAITS:
                if guarded:
                    self.flag(call, "wait under a data-dependent branch or loop (not every program waits)")
                elif not self.waited:
                    self.waited = True
                continue
            if self.waited or name in TRIGGERS:
                continue
            if name in STORES:
                self.flag(call, f"{name} before the wait (may overwrite what the kernel before still reads)")
            elif name in LOADS:
                ptr = call.func.value if isinstance(call.func, ast.Attribute) and name == "load" and \
                    not (isinstance(call.func.value, ast.Name) and call.func.value.id == "tl") else \
                    (call.args[0] if call.args else call)
                bad = self.pointers_of(ptr) - self.read_only
                if bad:
                    self.flag(call, f"read of {sorted(bad)} before the wait (an earlier kernel may write it)")
            elif isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) \
                    and call.func.value.id == "tl":
                continue  # tl.* other than loads and stores: index and value arithmetic
            elif isinstance(call.func, ast.Attribute):
                continue  # methods of values (.to, .reshape, ...)
            elif name not in PURE_HELPERS:
                self.flag(call, f"call of {name or '?'} before the wait (not known to be free of memory accesses)")


def check_source(text: str, kernel: str, *, constexprs: Mapping[str, object], pointers: Iterable[str],
                 read_only: Iterable[str] = (), line0: int = 0) -> list[Violation]:
    """Violations of the PDL rules in `kernel` (a def in `text`) with the given constexpr values;
    `pointers` are its pointer (and descriptor) parameters, `read_only` those no earlier kernel writes."""
    text = textwrap.dedent(text)
    tree = ast.parse(text)
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == kernel), None)
    if fn is None:
        return [Violation(kernel, 0, "no such kernel in the source", "")]
    w = _Walker(kernel, text.splitlines(), constexprs, set(pointers), set(read_only), line0)
    w.block(fn.body, False)
    if not w.waited:
        w.out.append(Violation(kernel, fn.lineno + line0, "no unconditional wait (griddepcontrol.wait)",
                               f"def {kernel}"))
    return w.out


_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(")
_ALLOWED = re.compile(r"^(mov|cvt|add|sub|mul|mad|shl|shr|and|or|xor|not|neg|min|max|div|rem|selp|setp|"
                      r"ld\.param|ld\.const|prefetch|griddepcontrol\.launch_dependents|cvta\.to\.global|"
                      r"cvta\.param|abs|bfe|bfi|prmt|lop3|brev|clz|popc|fma|rcp|sqrt|ex2|lg2|createpolicy|"
                      r"\{|\}|\.reg|\.shared|\.local)")


def check_ptx(ptx: str, kernel: str | None = None) -> list[Violation]:
    """Violations in the compiled PTX of an entry (the first, or `kernel`): every instruction before
    the first griddepcontrol.wait must be register / param / constant work, a prefetch, or the trigger;
    the wait must exist, unpredicated, with no branch before it."""
    m = None
    for m in _ENTRY.finditer(ptx):
        if kernel is None or m.group(1) == kernel:
            break
    if m is None or (kernel is not None and m.group(1) != kernel):
        return [Violation(kernel or "?", 0, "no such entry in the PTX", "")]
    name = m.group(1)
    start = ptx.index("{", m.end())
    out: list[Violation] = []
    for i, raw in enumerate(ptx[start + 1:].splitlines(), start=ptx[:start].count("\n") + 2):
        line = raw.split("//")[0].strip()
        if not line or line.startswith((".loc", ".file", "$L", ".pragma")) or line.endswith(":"):
            continue
        instr = line.lstrip("@!%p0123456789_ ").strip() if line.startswith("@") else line
        if instr.startswith("griddepcontrol.wait"):
            if line.startswith("@"):
                out.append(Violation(name, i, "predicated wait (not every thread waits)", line))
            return out
        if instr.startswith(("bra", "ret", "exit", "bar", "barrier")):
            out.append(Violation(name, i, "branch or barrier before the wait", line))
        elif not _ALLOWED.match(instr):
            out.append(Violation(name, i, "memory access before the wait", line))
        if line.startswith("}"):
            break
    out.append(Violation(name, 0, "no griddepcontrol.wait in the entry", ""))
    return out
