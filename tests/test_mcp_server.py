"""`formloop mcp` as a subprocess, driven through the MCP SDK's own stdio client: every tool, bad
inputs returned as structured errors, and the session surviving them."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from formloop.agent.server import TOOL_NAMES  # noqa: E402
from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library import get_template  # noqa: E402
from formloop.solve import enumerate_designs  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "templates" / "rownorm.py"
STUDY = Path(__file__).resolve().parents[1] / "studies" / "wall_relaxation_capacity.toml"
GEMM = {"op": "gemm", "shape": {"M": 1000, "N": 1000, "K": 1000}}
GELU_SPEC = (Path(__file__).resolve().parents[1] / "examples" / "dsl" / "linear_bias_gelu.fl").read_text()
BAD_SPEC = GELU_SPEC.replace("warps  = ?", "warps  = 2").replace("gelu(tanh)", "gelu(fast)")


def formloop_command() -> list[str]:
    exe = shutil.which("formloop", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "formloop.cli"]


def payload(result) -> dict:
    assert not getattr(result, "is_error", getattr(result, "isError", False)), result
    text = result.content[0].text
    return json.loads(text)


async def session_run(store: Path, calls):
    cmd = formloop_command()
    params = StdioServerParameters(command=cmd[0], args=[*cmd[1:], "mcp", "--store", str(store)],
                                   env={**os.environ, "FORMLOOP_PROVE_TIMEOUT": "60"})
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            out["tools"] = sorted(t.name for t in (await session.list_tools()).tools)
            for key, name, args in calls:
                out[key] = await session.call_tool(name, args)
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    store = tmp_path_factory.mktemp("mcp") / "p.db"
    calls = [
        ("list", "list_templates", {}),
        ("show", "show_template", {"template": "gemm-tiling"}),
        ("prove", "prove", {"template": "gemm-tiling"}),
        ("solve", "solve", {"template": "gemm-tiling", **GEMM}),
        ("check_ok", "check", {"template": "gemm-tiling", **GEMM,
                               "assignment": {"Tm": 128, "Tn": 128, "Tk": 32, "S": 3, "P": 1, "beta": 0}}),
        ("check_bad", "check", {"template": "gemm-tiling", **GEMM,
                                "assignment": {"Tm": 256, "Tn": 256, "Tk": 64, "S": 3, "P": 2, "beta": 0}}),
        ("sol", "sol_report", {"op": "gemm", "shape": {"M": 4096, "N": 4096, "K": 4096}}),
        ("evaluate", "evaluate", {"template": "gemm-tiling", **GEMM,
                                  "assignment": {"Tm": 128, "Tn": 128, "Tk": 32, "S": 3, "P": 1, "beta": 0}}),
        ("walls", "wall_relax", {"study": str(STUDY), "objective": "prefill", "start": "small"}),
        ("walls_bad", "wall_relax", {"study": str(STUDY), "objective": "everything"}),
        ("add_loose", "add_template", {"spec": f"{EXAMPLE}:rownorm_loose"}),
        ("add_good", "add_template", {"spec": f"{EXAMPLE}:rownorm"}),
        ("query", "population_query", {"kind": "templates", "status": "proved"}),
        ("query_cx", "population_query", {"kind": "templates", "status": "refuted"}),
        ("attention", "solve", {"template": "attention-decode", "shape": "1,32,8,128,4096"}),
        ("spec_ok", "dsl_check", {"spec": GELU_SPEC}),
        ("spec_refused", "dsl_check", {"spec": BAD_SPEC}),
        # bad inputs: structured results, and the session goes on
        ("unknown", "solve", {"template": "no-such-template", **GEMM}),
        ("bad_shape", "solve", {"template": "gemm-tiling", "op": "gemm", "shape": {"M": 0, "N": 1, "K": 1}}),
        ("bad_kind", "population_query", {"kind": "everything"}),
        ("bad_type", "solve", {"template": 3}),
        ("after", "list_templates", {}),
    ]
    return anyio.run(session_run, store, calls)


def test_every_tool_is_listed(results):
    assert results["tools"] == sorted(TOOL_NAMES)


def test_contract_tools(results):
    lib = payload(results["list"])
    assert "gemm-tiling" in [t["name"] for t in lib["library"]]
    show = payload(results["show"])
    assert show["hash"] == get_template("gemm-tiling").content_hash
    assert [d["name"] for d in show["decisions"]] == ["Tm", "Tn", "Tk", "S", "P", "beta"]
    assert payload(results["prove"])["status"] == "proved"


def test_solve_check_evaluate_agree_with_enumeration(results):
    solve = payload(results["solve"])
    brute = enumerate_designs(get_template("gemm-tiling").formulate({"M": 1000, "N": 1000, "K": 1000, "e": 4},
                                                                    get_chip("illustrative")))
    assert solve["design"] == dict(brute.assignment) and solve["objective"] == pytest.approx(brute.objective)
    assert solve["source"] == "model" and solve["unit"] == "us"
    ok, bad = payload(results["check_ok"]), payload(results["check_bad"])
    assert ok["valid"] and ok["violations"] == []
    # 3 slots of (256*64 + 64*256) fp32 = 384 KiB > 96 KiB, and P=2 > S-2+beta=1
    assert not bad["valid"] and any("C1" in v for v in bad["violations"]) and any("C3" in v for v in bad["violations"])
    m = payload(results["evaluate"])["measurement"]
    assert m["provenance"]["tier"] in ("model", "emulated", "simulated", "gpu") and m["latency_us"] > 0


def test_sol_report_tool(results):
    rep = payload(results["sol"])["report"]
    assert rep["flops"] == 2 * 4096 ** 3  # hand count


def test_wall_relax_tool(results):
    walls = payload(results["walls"])
    assert walls["ok"] and walls["start"] == "1024/128"
    # every purchase lowered the worst ratio and stayed under the area ceiling; calls within the bound
    assert walls["purchases"] and all(p["predicted_drop"] > 0 for p in walls["purchases"])
    assert walls["area_mm2"] <= walls["ceiling_mm2"] and walls["calls"] <= walls["bound"]
    assert walls["L_model"] < 1.0  # better than the reference chip with its reference programs
    bad = payload(results["walls_bad"])
    assert bad["ok"] is False and bad["error"]["field"] == "objective"


def test_add_template_refuses_k1_and_admits_proved(results):
    loose, good = payload(results["add_loose"]), payload(results["add_good"])
    assert loose["status"] == "refuted" and not loose["admitted"]
    assert loose["counterexamples"][0]["obligation"] == "K1" and "BLOCK" in loose["counterexamples"][0]["witness"]
    assert good["status"] == "proved" and good["admitted"]
    proved = {r["name"] for r in payload(results["query"])["rows"]}
    assert proved == {"gemm-tiling", "rownorm"}
    assert [r["name"] for r in payload(results["query_cx"])["rows"]] == ["rownorm-loose"]


def test_bad_inputs_are_structured_and_the_server_survives(results):
    unknown = payload(results["unknown"])
    assert unknown["ok"] is False and unknown["error"]["type"] == "UnknownName"
    assert unknown["error"]["field"] == "template" and "gemm-tiling" in unknown["error"]["allowed"]
    bad_shape = payload(results["bad_shape"])
    assert bad_shape["ok"] is False and bad_shape["error"]["field"] == "shape M"
    assert payload(results["bad_kind"])["error"]["allowed"] == "templates, template, designs, measurements"
    # a wrongly typed argument is refused by the SDK's schema validation, as a tool error
    bad_type = results["bad_type"]
    assert getattr(bad_type, "is_error", getattr(bad_type, "isError", None)) is True
    assert payload(results["after"])["ok"] is True


def test_attention_and_kernel_specs(results):
    """attention-decode through the generic solve tool (its own defaults: bf16 on h200) picks the
    enumeration's optimum; a spec written as text is checked, and a refused one names every rule."""
    from formloop.library.attention_workload import workload

    r = payload(results["attention"])
    assert (r["template"], r["chip"], r["dtype"]) == ("attention-decode", "h200", "bf16")
    brute = enumerate_designs(get_template("attention-decode").formulate(workload((1, 32, 8, 128, 4096)),
                                                                         get_chip("h200")))
    assert r["objective_us"] == pytest.approx(brute.objective) and r["sol"]["floor_us"] <= r["objective_us"]
    ok = payload(results["spec_ok"])
    assert ok["ok"] and ok["kernel"] == "linear_gelu" and ok["design"]["instance_check"]["ok"]
    bad = payload(results["spec_refused"])
    assert bad["ok"] is False and bad["error"]["type"] == "SpecError"
    assert [d["field"] for d in bad["diagnostics"]] == ["warps (W)", "epilogue[2] gelu argument approx"]
    assert bad["lines"][0].startswith("<spec>:11:14: warps (W) = 2")
