"""Templates written outside the library: load `path/to/file.py:NAME`, check their structure.

A user template is a `Template` (or a function of no arguments returning one) bound to NAME in a
Python file. Loading it runs the file, so structural mistakes the contract already refuses
(a decision without a menu, a cost reading an undeclared variable) surface here, named with the
file and NAME. On top of those, a template that is to be proved and stored must state its scope,
a structural descriptor, and a chip binding if it reads chip parameters.

A user template is code formloop did not write. `load_user_template` first loads and validates it in
a child process (formloop.measure.sandbox) under `VET_WALL_S` seconds: a file or factory that calls
sys.exit / os._exit, raises KeyboardInterrupt, kills itself with a signal or runs past the limit is
refused with a named verdict (crashed, timed-out, exited), exit status 2. Only a file that loaded
cleanly there is loaded in this process (once per file content). Menus are bounded (`MAX_MENU`
values, each finite with magnitude <= `MAX_MENU_VALUE`) so that solving cannot hang on them.
Not defended: a file that behaves differently on its second load (its side effects run twice).

Origins say where a stored template can be loaded again: `library:NAME?opt=value&...` or
`file:/abs/path.py:NAME`."""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import sys
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from formloop.errors import FormloopError, InvalidInput, StructureError
from formloop.library import get_template
from formloop.measure.sandbox import run_untrusted
from formloop.template import Template

DESCRIPTOR_FIELDS = ("algorithm", "reuse", "placement", "resources")
VET_WALL_S = 60.0
MAX_MENU = 4096
MAX_MENU_VALUE = 2**53
_VETTED: set[tuple[str, str]] = set()


def parse_spec(spec: str) -> tuple[Path, str]:
    """'path/to/file.py:NAME' -> (path, NAME), both checked."""
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name:
        raise InvalidInput("template spec", spec, "path/to/file.py:NAME")
    if not name.isidentifier():
        raise InvalidInput("template spec NAME", name, "a Python identifier bound in the file")
    path = Path(path_text).expanduser()
    if path.suffix != ".py":
        raise InvalidInput("template spec path", path_text, "a .py file")
    if not path.is_file():
        raise InvalidInput("template spec path", path_text, "an existing .py file")
    return path.resolve(), name


def load_user_template(spec: str) -> Template:
    """The template bound to NAME in the file, validated for admission to the population (first in a
    child process under a time limit, then here)."""
    path, name = parse_spec(spec)
    key = (str(path), hashlib.sha256(path.read_bytes()).hexdigest())
    if key not in _VETTED:
        run_untrusted(vet_user_template, spec, what=f"user template {spec}", wall_s=VET_WALL_S)
        _VETTED.add(key)
    return _load(spec, path, name)


def vet_user_template(spec: str) -> str:
    """What runs in the child: load and validate; the template's hash when it passes."""
    path, name = parse_spec(spec)
    return _load(spec, path, name).content_hash


def _load(spec: str, path: Path, name: str) -> Template:
    module = _exec_file(path, spec)
    if not hasattr(module, name):
        found = sorted(k for k, v in vars(module).items() if isinstance(v, Template) or _is_factory(v))
        raise InvalidInput(f"name in {path.name}", name, found or "no templates are defined in the file")
    obj = getattr(module, name)
    if _is_factory(obj) and not isinstance(obj, Template):
        try:
            obj = obj()
        except FormloopError as exc:
            raise StructureError(f"{spec}: building the template failed: {exc}") from exc
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # the user's factory: named, never fatal
            raise StructureError(f"{spec}: building the template raised {type(exc).__name__}: "
                                 f"{str(exc)[:200]}") from None
    if not isinstance(obj, Template):
        raise StructureError(f"{spec}: NAME must be a Template or a function of no arguments returning one, "
                             f"got {type(obj).__name__}")
    validate_user_template(obj, where=spec)
    return obj


def validate_user_template(t: Template, *, where: str = "") -> None:
    """Checks beyond the contract's own: what the population and the verifier need to read."""
    at = f"{where}: " if where else ""
    if not t.scope:
        raise StructureError(f"{at}template {t.name} has no scope",
                             fix="state where it is valid, e.g. Constraint('fits', N <= 8192, 'scope')")
    missing = [f for f in DESCRIPTOR_FIELDS if not t.descriptor.get(f)]
    if missing:
        raise StructureError(f"{at}template {t.name}: descriptor lacks {', '.join(missing)}",
                             fix=f"descriptor={{{', '.join(repr(f) + ': ...' for f in DESCRIPTOR_FIELDS)}}}")
    if any(p.payload.kind == "chip" for p in t.params) and t.bind_chip is None:
        raise StructureError(f"{at}template {t.name} reads chip parameters but has no bind_chip",
                             fix="pass bind_chip=lambda chip: {...} giving each chip parameter")
    for d in t.decisions:
        menu = tuple(d.decision.menu)
        if len(menu) > MAX_MENU:
            raise StructureError(f"{at}template {t.name}: decision {d.name} has {len(menu)} menu values",
                                 fix=f"at most {MAX_MENU} values per menu")
        bad = [v for v in menu if not _finite_number(v)]
        if bad:
            raise StructureError(f"{at}template {t.name}: decision {d.name} has menu value {bad[0]!r}",
                                 fix=f"finite numbers of magnitude <= 2^53 ({MAX_MENU_VALUE})")
    if not any(p.payload.kind == "workload" for p in t.params):
        raise StructureError(f"{at}template {t.name} reads no workload parameter; nothing could select it")


def _finite_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) <= MAX_MENU_VALUE


def _is_factory(obj) -> bool:
    if not callable(obj) or isinstance(obj, type):
        return False
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in sig.parameters.values())


def _exec_file(path: Path, spec: str):
    # A module name unique per file content: reloading an edited file gives a fresh module.
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    mod_name = f"formloop_user_{path.stem}_{digest}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    loader_spec = importlib.util.spec_from_file_location(mod_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise InvalidInput("template spec path", str(path), "a loadable Python file")
    module = importlib.util.module_from_spec(loader_spec)
    try:
        loader_spec.loader.exec_module(module)
    except FormloopError as exc:
        raise StructureError(f"{spec}: {exc}") from exc
    except SyntaxError as exc:
        raise StructureError(f"{spec}: syntax error at line {exc.lineno}: {exc.msg}") from exc
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # the user's file raised or exited: name it
        raise StructureError(f"{spec}: loading the file raised {type(exc).__name__}: {str(exc)[:200]}") from None
    sys.modules[mod_name] = module
    return module


# -- origins -----------------------------------------------------------------------------------

def library_origin(name: str, options: dict) -> str:
    return f"library:{name}" + (f"?{urlencode(sorted(options.items()))}" if options else "")


def file_origin(spec: str) -> str:
    path, name = parse_spec(spec)
    return f"file:{path}:{name}"


def load_origin(origin: str) -> Template:
    """Load a stored template again from where it came from."""
    kind, _, rest = origin.partition(":")
    if kind == "library":
        name, _, query = rest.partition("?")
        return get_template(name, **dict(parse_qsl(query)))
    if kind == "file":
        return load_user_template(rest)
    raise InvalidInput("template origin", origin, "library:NAME[?opts] or file:PATH:NAME")


def source_text(t: Template, origin: str) -> str:
    """What the store keeps as the template's source: the contract, and the file for user templates."""
    text = t.canonical_text()
    if origin.startswith("file:"):
        path, _ = parse_spec(origin[len("file:"):])
        text += "\n\n# --- source " + str(path) + "\n" + path.read_text()
    return text
