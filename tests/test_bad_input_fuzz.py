"""The bad-input suite: hypothesis draws bad values for every argument of every CLI command and
every MCP tool (out-of-range numbers, non-finite and non-numeric text, Unicode digits, shapes beyond
2^31-1, unknown names, paths of the wrong kind, binary files) and holds each answer to:

    CLI  exit status 2, one named error (`error: ...` or typer's usage error naming the argument),
         no traceback, no hang (20 s), the store byte-for-byte unchanged;
    MCP  ok: false with a named error (never InternalError), strict JSON, the store unchanged.

Counts (cases, tracebacks, hangs, accepted) are printed at the end of the module with `-s`:
    pytest -s -q -p no:xdist tests/test_bad_input_fuzz.py
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from formloop.agent.server import Tools, structured
from formloop.cli import app
from formloop.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
ADD = ROOT / "tests" / "fixtures" / "integrity" / "problems" / "add.py"
HONEST = ROOT / "tests" / "fixtures" / "integrity" / "honest" / "add.py"
STUDY = ROOT / "studies" / "wall_relaxation_capacity.toml"
SPEC = ROOT / "examples" / "dsl" / "linear_bias_gelu.fl"
runner = CliRunner()
TALLY: Counter = Counter()
FUZZ = settings(max_examples=int(os.environ.get("FUZZ_CLI", "260")), deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


class Hang(Exception):
    pass


def _alarm(*_):
    raise Hang()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    store = root / "p.db"
    r = runner.invoke(app, ["run", "gemm", "--shape", "64,64,64", "--store", str(store)],
                      env={"FORMLOOP_TIER": "model"})
    assert r.exit_code == 0, r.output
    (root / "dir").mkdir()
    (root / "bin.dat").write_bytes(bytes(range(256)) * 64)
    (root / "file.txt").write_text("not what was asked for\n")
    (root / "log.jsonl").write_text('{"problem": "x"}\n')
    yield {"root": root, "store": store}
    print(f"\nbad-input suite: {TALLY['cli'] + TALLY['mcp']} cases ({TALLY['cli']} CLI, {TALLY['mcp']} MCP); "
          f"tracebacks {TALLY['traceback']}, hangs {TALLY['hang']}, accepted {TALLY['accepted']}")


def digest(store: Path) -> str:
    h = hashlib.sha256()
    for p in (store, store.with_name(store.name + "-wal")):
        if p.exists():
            h.update(p.read_bytes())
    return h.hexdigest()


# -- bad values ------------------------------------------------------------------------------

BIG = st.integers(min_value=2**31, max_value=2**80)
NEG = st.integers(min_value=-2**70, max_value=-1)
NONNUM = st.sampled_from(["nan", "inf", "-inf", "abc", "", " ", "1e400", "0x10", "１２", "٣", "4_096", "1,5",
                          "--", "None", "\x00"])
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12).filter(lambda s: s.strip() != "")


def ints(lo: int, hi: int):
    return st.one_of(st.integers(max_value=lo - 1, min_value=lo - 2**40),
                     st.integers(min_value=hi + 1, max_value=2**70), NONNUM).map(str)


def floats(lo: float, hi: float, lo_open: bool = True):
    below = st.floats(max_value=lo, allow_nan=False, allow_infinity=False,
                      exclude_max=not lo_open, min_value=-1e300)
    return st.one_of(below, st.floats(min_value=hi, exclude_min=True, max_value=1e300), NONNUM).map(str)


def names(known: tuple[str, ...] = ()):
    return TEXT.filter(lambda s: s not in known and not s.startswith("-"))


def shapes(n: int):
    item = st.one_of(BIG, NEG, st.just(0)).map(str)
    return st.one_of(
        st.lists(item, min_size=n, max_size=n).map(",".join),
        st.sampled_from(["４０９６,4,4", "4_096,4,4", "", "1,2", ",".join(["4"] * (n + 1)), "M=1,M=2", "1,M=2,3x",
                         "9" * 40, "nan,1,1", "1.5,2,2", "-0,1,1"]),
        TEXT)


def paths(*kinds: str):
    return st.sampled_from(kinds)


# command -> (base argv with {slots}, {option: strategy}); the option's value replaces its slot or is appended
GEMM = "64,64,64"
CLI_CASES = {
    "solve": (["solve", "gemm-tiling", "--shape", GEMM], {
        "--shape": shapes(3), "--solver": names(("milp", "enumerate")), "--chip": names(), "--dtype": names(),
        "--calibration": paths("dir", "bin.dat", "missing", "file.txt"), "--option": names(), "TEMPLATE": names()}),
    "check": (["check", "gemm-tiling", "--design", "128,128,32,3,1,0", "--shape", GEMM], {
        "--design": st.one_of(shapes(6), TEXT), "--shape": shapes(3), "--chip": names()}),
    "evaluate": (["evaluate", "gemm-tiling", "--design", "128,128,32,3,1,0", "--shape", GEMM], {
        "--tier": names(("auto", "model", "gpu")), "--shape": shapes(3), "--design": TEXT}),
    "sol": (["sol", "gemm", "--shape", GEMM], {
        "--shape": shapes(3), "--clock-mhz": floats(0, 10000), "--chip": names(), "--dtype": names(),
        "--problem-only": paths("dir", "bin.dat", "missing", "file.txt")}),
    "measure": (["measure", "gemm-tiling", "--shape", GEMM], {
        "--shape": shapes(3), "--solver": names(("milp", "enumerate")), "--chip": names(),
        "--calibration": paths("dir", "bin.dat", "missing", "file.txt")}),
    "run": (["run", "gemm", "--shape", GEMM], {
        "--shape": shapes(3), "--tier": names(("auto", "model", "gpu")), "--chip": names(), "--dtype": names(),
        "--template": names()}),
    "prove": (["prove", "gemm-tiling"], {
        "--timeout": floats(0, 3600), "--out": paths("dir", "missing/x.json", "bin.dat/x.json"),
        "--dtype": names(), "TEMPLATE": names()}),
    "verify": (["verify", "gemm-tiling", "--schedule", "3,2,1"], {
        "--warps": ints(1, 8), "--phases": ints(1, 16), "--timeout": floats(0, 3600), "--schedule": TEXT,
        "--fault": names(), "--recheck-only": paths("dir", "bin.dat", "missing", "file.txt", "log.jsonl")}),
    "prove-chain": (["prove-chain"], {"--depth": ints(1, 5), "--mode": names(("full", "node", "query")),
                                      "--shapes": shapes(2), "--fault": TEXT}),
    "harness": (["harness", str(ADD), str(HONEST), "--no-time"], {
        "--seed": ints(0, 2**32 - 1), "--sets": ints(1, 100), "--timeout": floats(0, 86400),
        "--memory-gb": floats(0.0625, 4096, lo_open=False), "--rtol": floats(0, 1),
        "--tolerance": names(("formloop", "kernelbench")), "--timing-mode": names(("auto", "graph", "eager")),
        "--clock-mhz": floats(0, 10000), "PROBLEM": paths("dir", "bin.dat", "missing", "file.txt")}),
    "integrity": (["integrity", str(ADD), str(HONEST)], {
        "--seed": ints(0, 2**32 - 1), "--timeout": floats(0, 86400), "--probe": names(),
        "CANDIDATE": paths("dir", "bin.dat", "missing", "file.txt")}),
    "schedule": (["schedule", "{log}"], {
        "--min-retention": floats(0, 1, lo_open=False), "--eps": floats(0, 1000, lo_open=False),
        "--window": ints(1, 100000), "--eps-grid": TEXT, "--window-grid": TEXT,
        "LOG": paths("dir", "bin.dat", "missing"), "--plot": paths("file.txt", "missing/sub/dir")}),
    "campaign": (["campaign", "{log}"], {"--p": TEXT, "LOG": paths("dir", "bin.dat", "missing")}),
    "synth-log": (["synth-log", "{root}/out.jsonl"], {
        "--problems": ints(1, 10000), "--attempts": ints(1, 10000), "--seed": ints(0, 2**32 - 1),
        "OUT": paths("dir", "missing/x.jsonl")}),
    "codesign": (["codesign", str(STUDY)], {"STUDY": paths("dir", "bin.dat", "missing", "log.jsonl")}),
    "wall-relax": (["wall-relax", str(STUDY), "--objective", "prefill"], {
        "--objective": names(), "--start": names(), "--k": ints(1, 64), "--rounds": ints(1, 1000),
        "STUDY": paths("dir", "bin.dat", "missing")}),
    "problems": (["problems", "{root}/dir", "--no-measure"], {
        "--level": ints(1, 3), "--clock-mhz": floats(0, 10000), "--budget-s": floats(0, 86400),
        "DIRECTORY": paths("bin.dat", "missing")}),
    "dsl check": (["dsl", "check", str(SPEC)], {
        "--shape": TEXT, "--solver": names(("milp", "enumerate")), "FILE": paths("dir", "bin.dat", "missing"),
        "--calibration": paths("dir", "bin.dat", "missing")}),
    "population ls": (["population", "ls"], {"--status": names(("proved", "refuted", "unresolved"))}),
    "population show": (["population", "show", "ffffffffff"], {"TEMPLATE": names()}),
    "population measurements": (["population", "measurements"], {"--tier": names(("model", "emulated", "simulated",
                                                                                  "gpu"))}),
    "population query": (["population", "query"], {"--kind": names(("templates", "template", "designs",
                                                                    "measurements")),
                                                   "--status": names(("proved", "refuted", "unresolved"))}),
    "population add": (["population", "add", "x"], {"SPEC": names()}),
    "show": (["show", "gemm-tiling"], {"TEMPLATE": names(), "--option": TEXT}),
    "templates": (["templates", "--json"], {"--store": paths("dir", "bin.dat", "file.txt")}),
    "demo": (["demo"], {"--store": paths("dir", "bin.dat", "file.txt")}),
    "dsl emit": (["dsl", "emit", str(SPEC)], {"--shape": TEXT, "FILE": paths("dir", "bin.dat", "missing")}),
    "dsl run": (["dsl", "run", str(SPEC), "--no-timing"], {"--shape": TEXT, "FILE": paths("dir", "bin.dat")}),
    "population check": (["population", "check"], {"--store": paths("dir", "missing")}),  # damage: exit 1
    "population export": (["population", "export", "{root}/e.json"], {"DEST": paths("dir", "file.txt",
                                                                                    "missing/e.json"),
                                                                      "--store": paths("dir", "bin.dat")}),
    "population backup": (["population", "backup", "{root}/b.db"], {"DEST": paths("dir", "file.txt",
                                                                                   "missing/b.db")}),
}
POSITIONAL_INDEX = {"TEMPLATE": 1, "PROBLEM": 1, "CANDIDATE": 2, "LOG": 1, "OUT": 1, "STUDY": 1, "DIRECTORY": 1,
                    "FILE": 1, "SPEC": 1, "DEST": 1}  # after the command's words
PATHY = {"--store", "--calibration", "--out", "--plot", "--problem-only", "--recheck-only", "PROBLEM", "CANDIDATE",
         "LOG", "OUT",
         "STUDY", "DIRECTORY", "FILE", "DEST"}
CLI_CHOICES = [(c, o) for c, (_, opts) in CLI_CASES.items() for o in opts]


def _argv(command: str, option: str, value: str, world: dict) -> list[str]:
    base, _ = CLI_CASES[command]
    root = world["root"]
    argv = [a.format(root=root, log=root / "log.jsonl") for a in base]
    if option in PATHY:
        value = str(root / value)
    if option == "--problem-only":
        return ["sol", "--problem", value]
    if option == "--recheck-only":
        return ["verify", "--recheck", value]
    if option.isupper():
        argv[POSITIONAL_INDEX[option] + len(command.split()) - 1] = value
        return argv
    if option in argv:
        argv[argv.index(option) + 1] = value
        return argv
    return [*argv, option, value]


def _named(output: str, option: str) -> bool:
    text = " ".join(output.split()).lower()
    key = option.lstrip("-").lower().replace("-only", "")
    words = {key, key.replace("-", "_"), key.replace("-", " "), "spec", "template", "shape", "store", "path", "file",
             "gemm", "certificate"}
    return ("error:" in text or "invalid value" in text or "no such option" in text or "missing" in text) and \
        any(w in text for w in words)


@FUZZ
@given(case=st.sampled_from(CLI_CHOICES), data=st.data())
def test_cli_bad_input_is_one_named_error_exit_2_store_unchanged(world, case, data):
    command, option = case
    value = data.draw(CLI_CASES[command][1][option], label=f"{command} {option}")
    argv = _argv(command, option, value, world)
    if (command.startswith("population") or command == "run") and option != "--store":
        argv += ["--store", str(world["store"])]
    before = digest(world["store"])
    TALLY["cli"] += 1
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        r = runner.invoke(app, argv, env={"FORMLOOP_STORE": str(world["store"]), "FORMLOOP_TIER": "model",
                                          "FORMLOOP_PROVE_TIMEOUT": "20"})
    except Hang:
        TALLY["hang"] += 1
        raise AssertionError(f"hang: {argv}") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    crashed = r.exception is not None and not isinstance(r.exception, SystemExit)
    TALLY["traceback"] += crashed or "Traceback" in r.output
    TALLY["accepted"] += r.exit_code == 0
    assert not crashed and "Traceback" not in r.output, (argv, repr(r.exception), r.output)
    if option == "--design":  # a design outside the menus is a violation (exit 1), named per rule
        assert r.exit_code in (1, 2) and ("error:" in r.output or "infeasible" in r.output or "violat" in r.output
                                          or "VIOLAT" in r.output), (argv, r.exit_code, r.output)
        return
    assert r.exit_code == 2, (argv, r.exit_code, r.output)
    assert _named(r.output, option), (argv, r.output)
    assert digest(world["store"]) == before, argv


# -- MCP tools (the same api functions, wrapped as the server wraps them) ---------------------

MCP_CASES = {
    "show_template": ({"template": "gemm-tiling"}, {"template": names(), "options": st.dictionaries(TEXT, TEXT,
                                                                                                     min_size=1)}),
    "solve": ({"template": "gemm-tiling", "shape": GEMM}, {"shape": shapes(3), "chip": names(), "dtype": names(),
                                                           "solver": names(("milp", "enumerate")), "op": names()}),
    "check": ({"template": "gemm-tiling", "assignment": "128,128,32,3,1,0", "shape": GEMM},
              {"shape": shapes(3), "assignment": st.one_of(TEXT, shapes(6))}),
    "sol_report": ({"op": "gemm", "shape": GEMM}, {"shape": shapes(3), "op": names(), "chip": names(),
                                                  "clock_mhz": st.sampled_from([float("nan"), float("inf"), -1.0,
                                                                                0.0, 1e12])}),
    "evaluate": ({"template": "gemm-tiling", "assignment": "128,128,32,3,1,0", "shape": GEMM},
                 {"tier": names(("auto", "model", "gpu")), "shape": shapes(3)}),
    "measure": ({"template": "gemm-tiling", "shape": GEMM}, {"shape": shapes(3), "chip": names(),
                                                            "solver": names(("milp", "enumerate"))}),
    "run": ({"workload": "gemm", "shapes": [GEMM]}, {"shapes": st.lists(shapes(3), min_size=1, max_size=2),
                                                     "chip": names(), "dtype": names()}),
    "prove_chain": ({"depth": 1, "shapes": "3"}, {"depth": st.integers().filter(lambda d: not 1 <= d <= 5),
                                                  "mode": names(("full", "node", "query")), "shapes": shapes(2)}),
    "wall_relax": ({"study": str(STUDY), "objective": "prefill"}, {"objective": names(), "start": names()}),
    "population_query": ({"kind": "templates"}, {"kind": names(("templates", "template", "designs",
                                                                 "measurements")),
                                                 "status": names(("proved", "refuted", "unresolved"))}),
    "add_template": ({"spec": "x"}, {"spec": names()}),
    "prove": ({"template": "gemm-tiling"}, {"template": names()}),
    "dsl_check": ({"path": str(SPEC)}, {"shape": TEXT, "solver": names(("milp", "enumerate"))}),
    "dsl_run": ({"path": str(SPEC), "timing": False}, {"shape": TEXT, "spec": TEXT}),
}
MCP_CHOICES = [(t, a) for t, (_, args) in MCP_CASES.items() for a in args]


@settings(FUZZ, max_examples=int(os.environ.get("FUZZ_MCP", "80")))
@given(case=st.sampled_from(MCP_CHOICES), data=st.data())
def test_mcp_bad_input_is_a_named_error_strict_json_store_unchanged(world, case, data):
    tool, arg = case
    base, strategies = MCP_CASES[tool]
    kwargs = {**base, arg: data.draw(strategies[arg], label=f"{tool} {arg}")}
    tools = Tools(load_settings({"FORMLOOP_STORE": str(world["store"]), "FORMLOOP_TIER": "model",
                                 "FORMLOOP_PROVE_TIMEOUT": "20"}))
    before = digest(world["store"])
    TALLY["mcp"] += 1
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        out = structured(getattr(tools, tool))(**kwargs)
    except Hang:
        TALLY["hang"] += 1
        raise AssertionError(f"hang: {tool} {kwargs}") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    json.dumps(out, allow_nan=False)
    refused = out.get("ok") is False or (arg == "assignment" and _refused_design(out))
    TALLY["accepted"] += not refused
    TALLY["traceback"] += out.get("error", {}).get("type") == "InternalError"
    assert refused, (tool, kwargs, str(out)[:300])
    if out["ok"]:  # a design outside the menus: answered, with every violated rule named, never valid
        assert digest(world["store"]) == before
        return
    assert out["error"]["type"] != "InternalError", (tool, kwargs, out["error"])
    assert out["error"]["message"], out
    assert digest(world["store"]) == before, (tool, kwargs)


def _refused_design(out: dict) -> bool:
    """check: valid false with the violations named; evaluate: the measurement failed, with the reason."""
    if "valid" in out:
        return out["valid"] is False and bool(out.get("violations"))
    m = out.get("measurement") or {}
    return m.get("ok") is False and bool(m.get("failure"))
