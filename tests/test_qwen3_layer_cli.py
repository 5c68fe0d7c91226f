"""`formloop layer`: named errors for bad models and scenarios (exit 2), and a plan at the tiny
config (model times, labelled)."""
import json

import pytest
from typer.testing import CliRunner

from formloop import api
from formloop.cli import app
from formloop.errors import InvalidInput
from formloop.library.qwen3_layer_template import Fusion

runner = CliRunner()


@pytest.mark.parametrize("args,needle", [
    (["layer", "qwen3-9b", "--scenario", "decode:8"], "invalid model"),
    (["layer", "qwen3-8b", "--scenario", "decod:8"], "invalid scenario kind"),
    (["layer", "qwen3-8b", "--scenario", "prefill:0"], "invalid scenario tokens"),
    (["layer", "qwen3-8b", "--scenario", "decode:x"], "invalid scenario history"),
    (["layer", "qwen3-8b"], "invalid scenario"),
    (["layer", "qwen3-8b", "--scenario", "decode:8", "--measure", "maybe"], "invalid measure"),
])
def test_bad_input_is_named(args, needle):
    r = runner.invoke(app, args)
    assert r.exit_code == 2
    assert needle in r.output


def test_api_refuses_measuring_without_a_gpu():
    with pytest.raises(InvalidInput):
        api.layer("tiny", ["decode:40"], measure="yes")


def test_tiny_plan_json():
    r = runner.invoke(app, ["layer", "tiny", "--scenario", "decode:40", "--measure", "no", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    s = d["scenarios"][0]
    assert s["scenario"] == "decode:40" and s["measured"] is None
    assert set(s["fusion"]) == {"R1", "GL", "R2", "PD"}
    choices = s["layer_solve"]["choices"]
    assert len(choices) == 24 and s["model_us"] == pytest.approx(choices[0]["model_us"])
    fu = Fusion.of(s["fusion"])
    saving = fu.PD * s["layer_solve"]["t_pdl_us"] * fu.handovers(prefill=False)
    assert s["model_us"] == pytest.approx(sum(p["model_us"] for p in s["parts"]) - saving)
    assert d["units"]["model_us"] == "us (model)"
    assert all(p["design"] for p in s["parts"])


def test_norm_fusion_offers_the_nf_choices_and_solves_over_them():
    r = runner.invoke(app, ["layer", "tiny", "--scenario", "decode:40", "--measure", "no", "--norm-fusion", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)["scenarios"][0]
    choices = s["layer_solve"]["choices"]
    with_nf = [c for c in choices if c["fusion"].get("NF") == 1]
    assert with_nf and all(c["fusion"]["R1"] != 2 for c in with_nf)  # NF excludes R1 = 2
    assert len(choices) - len(with_nf) == 24
    assert s["model_us"] == pytest.approx(min(c["model_us"] for c in choices))
    text = runner.invoke(app, ["layer", "tiny", "--scenario", "decode:40", "--measure", "no", "--norm-fusion",
                               "--rope-fusion"])
    assert text.exit_code == 0 and "(R1 GL R2 PD NF RA: us, model)" in text.output
    listed = text.output.split("choices: ")[1].split(" (R1")[0].split("; ")
    assert len(listed) == 2 * len(choices) and {c.split()[0][-1] for c in listed} == {"0", "1"}  # RA 0 and 1


def test_norm_fusion_must_be_on_or_off():
    with pytest.raises(InvalidInput, match="norm_fusion"):
        api.layer("tiny", ["decode:40"], measure="no", norm_fusion="maybe")


@pytest.mark.parametrize("tune", [-1, True, 1.5, "2"])
def test_tune_must_be_a_whole_number(tune):
    with pytest.raises(InvalidInput, match="tune"):
        api.layer("tiny", ["decode:40"], measure="no", tune=tune)


def test_tune_needs_a_gpu_and_is_never_dropped():
    r = runner.invoke(app, ["layer", "tiny", "--scenario", "decode:40", "--measure", "no", "--tune", "2"])
    assert r.exit_code == 2 and "invalid tune" in r.output and "CUDA device" in r.output
