"""`formloop verify --recheck` exits 1 on any difference and names the field that differs: an
edited verdict or count, a query that does not match its hash, a missing field; 0 only when the
file and the fresh proof agree in full."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from formloop import api
from formloop.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("cert") / "cert.json"
    api.prove_template("gemm-tiling", None, timeout_s=30, out=str(out))
    return json.loads(out.read_text())


def _edit(d: dict, how: str) -> dict:
    d = json.loads(json.dumps(d))
    if how == "verdict":
        d["verdict"] = "counterexample"
    elif how == "counts":
        d["counts"]["proved"] -= 1
    elif how == "query":
        d["obligations"][0]["query"] += " "
    elif how.startswith("drop:"):
        del d[how[5:]]
    elif how.startswith("drop-obligation:"):
        del d["obligations"][2][how.split(":")[1]]
    return d


CASES = {"verdict": "field verdict", "counts": "field counts", "query": "query_sha256",
         "drop:template_hash": "field template_hash: missing", "drop:verdict": "field verdict: missing",
         "drop:counts": "field counts: missing", "drop:template": "field template: missing",
         "drop:options": "field options: missing", "drop:obligations": "field obligations: missing",
         "drop-obligation:verdict": "field obligations[2].verdict: missing",
         "drop-obligation:query": "field obligations[2].query: missing"}


def test_an_untouched_certificate_agrees_exit_0(cert, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cert))
    r = runner.invoke(app, ["verify", "--recheck", str(path), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["agrees"] is True


@pytest.mark.parametrize("how", sorted(CASES))
def test_any_difference_exits_1_and_names_the_field(cert, tmp_path, how):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(_edit(cert, how)))
    r = runner.invoke(app, ["verify", "--recheck", str(path)])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert CASES[how] in " ".join(r.output.split()), r.output
    j = runner.invoke(app, ["verify", "--recheck", str(path), "--json"])
    assert j.exit_code == 1 and json.loads(j.stdout)["agrees"] is False


def test_what_is_not_a_certificate_is_bad_input(tmp_path):
    for name, data in (("bin", bytes(range(256))), ("txt", b"hello"), ("list", b"[1, 2]"),
                       ("other", b'{"format": "something-else"}')):
        path = tmp_path / name
        path.write_bytes(data)
        r = runner.invoke(app, ["verify", "--recheck", str(path)])
        assert r.exit_code == 2 and r.output.startswith("error:") and "Traceback" not in r.output, r.output
