"""Kernel problems in the common benchmark format: a Python file with a `Model` (torch.nn.Module),
`get_inputs()` (the forward arguments) and `get_init_inputs()` (the constructor arguments).

Optional module-level names:

* `SOL = {"op": ..., "shape": {...}}` names the hand formula of `formloop.sol.ops` that the problem
  computes; automatic counting must agree with it.
* `SMALL = {"NAME": value, ...}` gives CPU-test sizes for the file's top-level size constants.
  `load_problem(path, small=True)` executes the file with each named constant rebound to its small
  value right after the file assigns it, so everything derived from it (shapes, `SOL`) follows.
  A KernelBench-size problem stays the file's own size; tests and CPU runs use `small=True`.
* `LEVEL` (1, 2 or 3) where the file does not sit in a `level1/`, `level2/`, `level3/` folder."""
from __future__ import annotations

import ast
import importlib.util
import itertools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from formloop.errors import InvalidInput, StructureError

_counter = itertools.count()


@dataclass(frozen=True)
class Problem:
    name: str
    path: Path
    Model: type
    get_inputs: Callable[[], list]
    get_init_inputs: Callable[[], list]
    SOL: Mapping | None = None
    module: ModuleType | None = field(default=None, repr=False, compare=False)
    small: bool = False              # loaded at its SMALL sizes
    level: int | None = None         # 1 single operators, 2 fused chains, 3 whole models

    def build(self):
        """A fresh reference model from the problem's constructor arguments."""
        return self.Model(*call_inputs(self, "get_init_inputs"))


def _fail(path: Path, what: str, fix: str) -> StructureError:
    return StructureError(f"problem file {path}: {what}", fix=fix)


def load_problem(path: str | Path, *, small: bool = False) -> Problem:
    """Import a problem file and check that it has the three required names and a valid SOL hint.
    `small=True` rebinds the constants named in its `SMALL` dict (see the module docstring)."""
    import torch

    p = Path(path)
    if p.is_dir() or p.suffix != ".py":
        raise InvalidInput("problem path", str(path), "a .py file with Model, get_inputs, get_init_inputs")
    if not p.exists():
        raise InvalidInput("problem path", str(path), "an existing .py file", fix="check the path")
    mod_name = f"formloop_problem_{p.stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(mod_name, p)
    module = importlib.util.module_from_spec(spec)
    try:
        code = _small_code(p) if small else None
        if code is None:
            spec.loader.exec_module(module)
        else:
            sys.modules[mod_name] = module      # dataclasses and pickling look the module up by name
            exec(code, module.__dict__)
    except SyntaxError as exc:
        raise _fail(p, f"syntax error at line {exc.lineno}: {exc.msg}", "fix the Python syntax") from None
    except StructureError:
        raise
    except Exception as exc:  # an import-time failure is the file's fault; say which
        raise _fail(p, f"importing it raised {type(exc).__name__}: {exc}", "make the file importable") from None
    finally:
        sys.modules.pop(mod_name, None)

    model = getattr(module, "Model", None)
    if model is None:
        raise _fail(p, "has no `Model` class", "define class Model(torch.nn.Module)")
    if not (isinstance(model, type) and issubclass(model, torch.nn.Module)):
        raise _fail(p, f"`Model` is {type(model).__name__}, not a torch.nn.Module subclass",
                    "define class Model(torch.nn.Module)")
    fns = {}
    for name in ("get_inputs", "get_init_inputs"):
        fn = getattr(module, name, None)
        if fn is None:
            raise _fail(p, f"has no `{name}()`", f"define {name}() returning a list")
        if not callable(fn):
            raise _fail(p, f"`{name}` is not callable", f"define {name}() as a function returning a list")
        fns[name] = fn
    hint = getattr(module, "SOL", None)
    if hint is not None:
        _check_hint(p, hint)
    return Problem(name=p.stem, path=p, Model=model, get_inputs=fns["get_inputs"],
                   get_init_inputs=fns["get_init_inputs"], SOL=hint, module=module,
                   small=small and hasattr(module, "SMALL"), level=_level(p, module))


def _level(p: Path, module) -> int | None:
    folder = p.parent.name
    if folder.startswith("level") and folder[5:].isdigit():
        return int(folder[5:])
    level = getattr(module, "LEVEL", None)
    if level is not None and level not in (1, 2, 3):
        raise _fail(p, f"LEVEL = {level!r}", "LEVEL is 1 (single operator), 2 (fused chain) or 3 (whole model)")
    return level


def _small_code(p: Path):
    """The file's code with every constant named in its `SMALL` dict rebound after each top-level
    statement that assigns it; None if the file has no `SMALL`."""
    tree = ast.parse(p.read_text(), filename=str(p))
    small = None
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SMALL" for t in stmt.targets):
            try:
                small = ast.literal_eval(stmt.value)
            except ValueError:
                raise _fail(p, "SMALL is not a literal dict", 'write SMALL = {"NAME": 64, ...} with literal values')
    if small is None:
        return None
    if not isinstance(small, dict) or not all(isinstance(k, str) for k in small):
        raise _fail(p, f"SMALL = {small!r}", 'write SMALL = {"NAME": 64, ...} naming top-level constants')
    body, assigned = [], set()
    for stmt in tree.body:
        body.append(stmt)
        names = _assigned_names(stmt) & set(small)
        assigned |= names
        for name in sorted(names):
            rebind = ast.parse(f"{name} = {small[name]!r}").body[0]
            body.append(ast.copy_location(rebind, stmt))
    missing = sorted(set(small) - assigned)
    if missing:
        raise _fail(p, f"SMALL names {', '.join(missing)}, which the file never assigns at top level",
                    "name only top-level constants in SMALL")
    tree.body = body
    return compile(ast.fix_missing_locations(tree), str(p), "exec")


def _assigned_names(stmt: ast.stmt) -> set[str]:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else (
        [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else [])
    names = set()
    for t in targets:
        for node in ast.walk(t):
            if isinstance(node, ast.Name):
                names.add(node.id)
    return names


def _check_hint(p: Path, hint) -> None:
    from formloop.sol.ops import get_op

    if not isinstance(hint, Mapping) or "op" not in hint or "shape" not in hint:
        raise _fail(p, f"SOL hint {hint!r} is malformed", 'write SOL = {"op": "<op>", "shape": {...}}')
    get_op(hint["op"]).bind(hint["shape"])  # raises naming the bad op or field


def call_inputs(problem: Problem, what: str = "get_inputs") -> list:
    """Call `get_inputs()` / `get_init_inputs()` and check it returns a list or tuple."""
    fn = getattr(problem, what)
    try:
        values = fn()
    except Exception as exc:
        raise _fail(problem.path, f"{what}() raised {type(exc).__name__}: {exc}", f"make {what}() runnable") from None
    if not isinstance(values, (list, tuple)):
        raise _fail(problem.path, f"{what}() returned {type(values).__name__}", "return a list")
    return list(values)
