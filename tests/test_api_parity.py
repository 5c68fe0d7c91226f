"""Every MCP tool and its CLI twin answer the same inputs with the same JSON.

The same sequence of calls runs twice, once through the MCP tool functions (agent.server.Tools,
wrapped by `structured` as the server wraps them) against store A, once through the CLI (--json,
typer's CliRunner) against store B. Stateful calls (prove, add, run, queries) see the same history
on both sides. Compared: the whole JSON, less wall-clock fields (seconds, timestamps), with the
store paths named alike and floats equal to 1e-9 (HiGHS' bound differs run to run in its last bits).
A tool without a twin in TWINS fails `test_every_tool_has_a_cli_twin`."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # dsl_run runs its kernel in the interpreter: set before triton is imported

import json  # noqa: E402
import math  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from formloop.agent.server import CLI_TWINS, TOOL_NAMES, Tools, structured  # noqa: E402
from formloop.cli import app  # noqa: E402
from formloop.library import get_template  # noqa: E402
from formloop.settings import load_settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "templates" / "rownorm.py"
STUDY = ROOT / "studies" / "wall_relaxation_capacity.toml"
GELU_SPEC = ROOT / "examples" / "dsl" / "linear_bias_gelu.fl"
TANH_SPEC = ROOT / "examples" / "dsl" / "fp16_bias_tanh.fl"
DECODE = "1,32,8,128,8192,page=16"
LBR = ROOT / "problems" / "level2" / "linear_bias_relu.py"
NO_MODEL_NEW = "ModelNew = None  # not a class: the harness refuses it\n"
GEMM = {"M": 1000, "N": 1000, "K": 1000}
RACY = {"Tm": 256, "Tn": 256, "Tk": 64, "S": 3, "P": 2, "beta": 0}
GOOD = {"Tm": 128, "Tn": 128, "Tk": 32, "S": 3, "P": 1, "beta": 0}
WALL_CLOCK = ("timestamp", "created_at", "created")
Z3_MODEL = ("trace", "witness", "replay")

# (tool, MCP arguments, CLI arguments), in the order both sides run them. {chain} is a per-side path.
TWINS = [
    ("prove", {"template": "gemm-tiling"}, ["population", "add", "gemm-tiling", "--json"]),
    ("prove", {"template": "gemm-tiling", "options": {"pre": "weak"}},
     ["population", "add", "gemm-tiling", "--option", "pre=weak", "--json"]),
    ("add_template", {"spec": f"{EXAMPLE}:rownorm_loose"}, ["population", "add", f"{EXAMPLE}:rownorm_loose", "--json"]),
    ("add_template", {"spec": f"{EXAMPLE}:rownorm"}, ["population", "add", f"{EXAMPLE}:rownorm", "--json"]),
    ("list_templates", {}, ["templates", "--json"]),
    ("show_template", {"template": "gemm-tiling", "options": {"pre": "strong"}},
     ["show", "gemm-tiling", "--option", "pre=strong", "--json"]),
    ("show_template", {"template": f"{EXAMPLE}:rownorm"}, ["show", f"{EXAMPLE}:rownorm", "--json"]),
    ("solve", {"template": "gemm-tiling", "shape": GEMM}, ["solve", "gemm-tiling", "--shape", "1000,1000,1000", "--json"]),
    # the Hopper routing: both faces solve gemm-tiling-gpu for gemm-tiling on an H200
    ("solve", {"template": "gemm-tiling", "shape": "512,512,512", "chip": "h200", "dtype": "bf16", "solver": "enumerate"},
     ["solve", "gemm-tiling", "--shape", "M=512,N=512,K=512", "--chip", "h200", "--dtype", "bf16", "--solver",
      "enumerate", "--json"]),
    ("solve", {"template": f"{EXAMPLE}:rownorm", "shape": {"R": 64, "D": 1024}},
     ["solve", f"{EXAMPLE}:rownorm", "--shape", "R=64,D=1024", "--json"]),
    ("check", {"template": "gemm-tiling", "assignment": RACY, "shape": GEMM},
     ["check", "gemm-tiling", "--design", "256,256,64,3,2,0", "--shape", "1000,1000,1000", "--json"]),
    ("check", {"template": "gemm-tiling", "assignment": GOOD, "shape": GEMM},
     ["check", "gemm-tiling", "--design", "Tm=128,Tn=128,Tk=32,S=3,P=1,beta=0", "--shape", "1000,1000,1000", "--json"]),
    ("sol_report", {"op": "gemm", "shape": {"M": 4096, "N": 4096, "K": 4096}, "chip": "h100", "clock_mhz": 1500.0},
     ["sol", "gemm", "--shape", "4096,4096,4096", "--chip", "h100", "--clock-mhz", "1500", "--json"]),
    ("sol_report", {"op": "linear", "shape": "64,256,512,act=gelu", "dtype": "bf16"},
     ["sol", "linear", "--shape", "64,256,512,act=gelu", "--dtype", "bf16", "--json"]),
    ("evaluate", {"template": "gemm-tiling", "assignment": GOOD, "shape": GEMM},
     ["evaluate", "gemm-tiling", "--design", "128,128,32,3,1,0", "--shape", "1000,1000,1000", "--json"]),
    ("measure", {"template": "gemm-tiling", "shape": {"M": 512, "N": 512, "K": 512}, "solver": "enumerate"},
     ["measure", "gemm-tiling", "--shape", "512,512,512", "--solver", "enumerate", "--json"]),
    ("run", {"workload": "gemm", "shapes": ["1000,1000,1000"]}, ["run", "gemm", "--shape", "1000,1000,1000", "--json"]),
    ("run", {"workload": "rmsnorm", "shapes": ["R=256,D=2048"]}, ["run", "rmsnorm", "--shape", "R=256,D=2048", "--json"]),
    ("prove_chain", {"depth": 1, "shapes": "3", "store": "{chain}"},
     ["prove-chain", "gemm", "--depth", "1", "--shapes", "3", "--store", "{chain}", "--json"]),
    ("wall_relax", {"study": str(STUDY), "objective": "prefill", "start": "small"},
     ["wall-relax", str(STUDY), "--objective", "prefill", "--start", "small", "--json"]),
    # attention through the generic tools: the template's defaults (bf16 on h200), its shape B,Hq,Hkv,D,L
    ("solve", {"template": "attention-decode", "shape": DECODE},
     ["solve", "attention-decode", "--shape", DECODE, "--json"]),
    ("measure", {"template": "attention-prefill", "shape": "1,32,8,128,1024", "solver": "enumerate"},
     ["measure", "attention-prefill", "--shape", "1,32,8,128,1024", "--solver", "enumerate", "--json"]),
    ("prove", {"template": "attention-prefill"}, ["population", "add", "attention-prefill", "--json"]),
    # kernel specs: the tool takes the spec's text (what an agent writes), the CLI its file
    ("dsl_check", {"spec": GELU_SPEC.read_text(), "solver": "enumerate", "shape": "512x1024x256"},
     ["dsl", "check", str(GELU_SPEC), "--solver", "enumerate", "--shape", "512x1024x256", "--json"]),
    ("dsl_run", {"path": str(TANH_SPEC), "shape": "70x40x64", "solver": "enumerate"},
     ["dsl", "run", str(TANH_SPEC), "--shape", "70x40x64", "--solver", "enumerate", "--json"]),
    # formloop optimize: a problem's record, and a submission judged like formloop's own (refused here)
    ("optimize_status", {"problem": str(LBR), "out": "{optdir}"},
     ["optimize-status", str(LBR), "--out", "{optdir}", "--json"]),
    ("optimize_submit", {"problem": str(LBR), "out": "{optdir}", "source": NO_MODEL_NEW, "small": True,
                         "tier": "interpreter"},
     ["optimize-submit", str(LBR), "--candidate", "{badfile}", "--out", "{optdir}", "--small", "--tier",
      "interpreter", "--json"]),
    ("population_query", {"kind": "templates", "status": "proved"},
     ["population", "query", "--kind", "templates", "--status", "proved"]),
    ("population_query", {"kind": "template", "template": get_template("gemm-tiling").content_hash[:8]},
     ["population", "query", "--kind", "template", "--template", get_template("gemm-tiling").content_hash[:8]]),
    ("population_query", {"kind": "designs", "workload": "gemm"}, ["population", "query", "--kind", "designs",
                                                                   "--workload", "gemm"]),
    ("population_query", {"kind": "measurements", "tier": "model"}, ["population", "query", "--kind", "measurements",
                                                                     "--tier", "model"]),
]
# Bad inputs: the MCP error message is the CLI's one line (exit status 2).
ERRORS = [
    ("solve", {"template": "gemm-tiling", "shape": "0,1,1"}, ["solve", "gemm-tiling", "--shape", "0,1,1"]),
    ("solve", {"template": "gemm-tiling", "shape": "１,1,1"}, ["solve", "gemm-tiling", "--shape", "１,1,1"]),
    ("solve", {"template": "gemm-tiling", "shape": GEMM, "chip": "h100", "options": {"pre": "weak"}},
     ["solve", "gemm-tiling", "--shape", "1000,1000,1000", "--chip", "h100", "--pre", "weak"]),
    ("sol_report", {"op": "gemm", "shape": "1,2,3,4"}, ["sol", "gemm", "--shape", "1,2,3,4"]),
    ("population_query", {"kind": "everything"}, ["population", "query", "--kind", "everything"]),
    ("solve", {"template": "attention-decode", "shape": "1,30,8,128,512"},
     ["solve", "attention-decode", "--shape", "1,30,8,128,512"]),
    ("measure", {"template": "attention-decode", "shape": "1,32,8,128,512", "dtype": "fp32"},
     ["measure", "attention-decode", "--shape", "1,32,8,128,512", "--dtype", "fp32"]),
    ("dsl_check", {"path": str(GELU_SPEC), "shape": "0x1x1"}, ["dsl", "check", str(GELU_SPEC), "--shape", "0x1x1"]),
]


def env_for(store: Path) -> dict[str, str]:
    return {"FORMLOOP_STORE": str(store), "FORMLOOP_TIER": "model", "FORMLOOP_PROVE_TIMEOUT": "60"}


def side_paths(root: Path, side: str) -> dict[str, str]:
    bad = root / "no_model_new.py"
    bad.write_text(NO_MODEL_NEW)
    return {"{chain}": str(root / f"chain-{side}.sqlite"), "{optdir}": str(root / f"optimize-{side}"),
            "{badfile}": str(bad)}


def fill(value, paths: dict[str, str]):
    if isinstance(value, str):
        return paths.get(value, value)
    if isinstance(value, list):
        return [fill(v, paths) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, paths) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity")
    stores = {"mcp": root / "mcp.db", "cli": root / "cli.db"}
    tools = Tools(load_settings(env_for(stores["mcp"])))
    runner = CliRunner()
    out = {"mcp": [], "cli": [], "mcp_errors": [], "cli_errors": [],
           "stores": [*stores.values(), *(Path(p) for side in stores for p in side_paths(root, side).values())]}
    for name, kwargs, argv in TWINS:
        out["mcp"].append(structured(getattr(tools, name))(**fill(kwargs, side_paths(root, "mcp"))))
        res = runner.invoke(app, fill(argv, side_paths(root, "cli")), env=env_for(stores["cli"]))
        assert res.exit_code in (0, 1), (argv, res.output)
        out["cli"].append(json.loads(res.stdout))
    for name, kwargs, argv in ERRORS:
        out["mcp_errors"].append(structured(getattr(tools, name))(**kwargs))
        out["cli_errors"].append(runner.invoke(app, argv, env=env_for(stores["cli"])))
    return out


def normalized(obj, stores: list[Path]):
    """The JSON less its wall-clock fields, with either side's store paths written <store>. Z3 may
    return a different (equally valid) model on each run, so a counterexample's concrete trace,
    witness and replay compare as present or absent only; the obligation and verdict compare exactly."""
    if isinstance(obj, dict):
        model = "obligation" in obj and obj.get("verdict", "counterexample") == "counterexample"
        return {k: (bool(v) if model and k in Z3_MODEL else normalized(v, stores)) for k, v in obj.items()
                if k != "ok" and not k.endswith("seconds") and k not in WALL_CLOCK}
    if isinstance(obj, list):
        return [normalized(v, stores) for v in obj]
    if isinstance(obj, str):
        for path in stores:
            obj = obj.replace(str(path), "<store>")
        return obj
    return obj


def same(a, b, path="") -> list[str]:
    """Where two JSON values differ (floats to 1e-9 relative)."""
    if isinstance(a, float) or isinstance(b, float):
        ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9)
        return [] if ok else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return [f"{path}: keys {list(a)} != {list(b)}"]
        return [d for k in a for d in same(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_every_tool_has_a_cli_twin():
    covered = {name for name, _, _ in TWINS}
    assert set(TOOL_NAMES) == set(CLI_TWINS), "each MCP tool names its CLI twin in agent.server.CLI_TWINS"
    assert covered == set(TOOL_NAMES), f"tools without a parity case: {sorted(set(TOOL_NAMES) - covered)}"


@pytest.mark.parametrize("i", range(len(TWINS)), ids=[f"{t[0]}-{n}" for n, t in enumerate(TWINS)])
def test_tool_and_cli_twin_agree(answers, i):
    mcp, cli = answers["mcp"][i], answers["cli"][i]
    assert mcp["ok"] is True, mcp
    diffs = same(normalized(mcp, answers["stores"]), normalized(cli, answers["stores"]))
    assert not diffs, diffs[:10]


def test_the_sequence_did_what_it_says(answers):
    """Independent of the faces: what the calls found, checked against known outcomes of the study."""
    got = {}
    for (name, kwargs, _), answer in zip(TWINS, answers["mcp"]):
        got.setdefault(name, []).append((kwargs, answer))
    (_, exact), (_, weak), (_, attention) = got["prove"]
    assert exact["status"] == "proved" and exact["admitted"]
    assert weak["status"] == "refuted" and weak["counterexamples"][0]["obligation"] == "K1"
    routed = next(a for k, a in got["solve"] if k.get("chip") == "h200")
    assert routed["template"] == "gemm-tiling-gpu" and routed["contract"] == "gpu (Triton family)"
    illustrative = got["solve"][0][1]
    assert illustrative["design"] == GOOD and round(illustrative["objective_us"], 1) == 53.1
    assert [a["valid"] for _, a in got["check"]] == [False, True]
    proved = got["population_query"][0][1]
    assert {r["name"] for r in proved["rows"]} == {"gemm-tiling", "rownorm", "attention-prefill"}
    assert got["run"][0][1]["rows"][0]["proof_source"] == "reused"  # proved by the prove call before it
    decode = next(a for k, a in got["solve"] if k["template"] == "attention-decode")
    assert (decode["chip"], decode["dtype"], decode["workload"]["page"]) == ("h200", "bf16", 16)
    assert decode["design"]["TM"] == 0 or 16 % decode["design"]["Bn"] == 0  # C6: a TMA tile inside one page
    assert decode["sol"]["floor_us"] <= decode["objective_us"] and decode["sol"]["bound"] == "memory"
    prefill = next(a for k, a in got["measure"] if k["template"] == "attention-prefill")
    assert prefill["design"]["Br"] % prefill["design"]["Bc"] == 0  # the causal walk's precondition
    assert prefill["rates"]["source"] == prefill["measurement"]["tier"]
    assert attention["status"] == "proved" and attention["admitted"]
    (_, check), = got["dsl_check"]
    a = check["design"]["assignment"]  # the spec fixes the tile, split and load path; the solver picks S, W, G
    assert (a["Tm"], a["Tn"], a["Tk"], a["KS"], a["L"]) == (128, 128, 64, 1, 1)
    assert check["design"]["workload"]["M"] == 512
    (_, run), = got["dsl_run"]
    assert run["correct"] and run["tier"] == "interpreter"
    assert run["correctness"]["rel_error"] <= run["correctness"]["tolerance"]


@pytest.mark.parametrize("i", range(len(ERRORS)), ids=[e[0] for e in ERRORS])
def test_bad_input_is_the_same_error_on_both_faces(answers, i):
    mcp, cli = answers["mcp_errors"][i], answers["cli_errors"][i]
    assert mcp["ok"] is False and cli.exit_code == 2
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"error: {mcp['error']['message']}"
    assert mcp["error"]["field"] and mcp["error"]["field"] in lines[0]
