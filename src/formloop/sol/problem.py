"""Kernel problems in the common benchmark format: a Python file with a `Model` (torch.nn.Module),
`get_inputs()` (the forward arguments) and `get_init_inputs()` (the constructor arguments).

An optional module-level `SOL = {"op": ..., "shape": {...}}` names the hand formula of
`formloop.sol.ops` that the problem computes; automatic counting must agree with it."""
from __future__ import annotations

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

    def build(self):
        """A fresh reference model from the problem's constructor arguments."""
        return self.Model(*call_inputs(self, "get_init_inputs"))


def _fail(path: Path, what: str, fix: str) -> StructureError:
    return StructureError(f"problem file {path}: {what}", fix=fix)


def load_problem(path: str | Path) -> Problem:
    """Import a problem file and check that it has the three required names and a valid SOL hint."""
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
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise _fail(p, f"syntax error at line {exc.lineno}: {exc.msg}", "fix the Python syntax") from None
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
                   get_init_inputs=fns["get_init_inputs"], SOL=hint, module=module)


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
