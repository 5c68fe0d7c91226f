"""Study files: bad files fail with a message naming the field; the CLI prints the tables,
emits JSON rows and exits 2 with one line on bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from formloop.cli import app
from formloop.codesign.study import load_study
from formloop.errors import InvalidInput, UnknownName

STUDY = Path(__file__).resolve().parents[1] / "studies" / "wall_relaxation_capacity.toml"


def variant(tmp_path, old: str, new: str) -> Path:
    text = STUDY.read_text()
    assert old in text, old
    path = tmp_path / "study.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("old,new,error,field", [
    ("vreg = [512, 1024, 2048]", "vregs = [512, 1024, 2048]", UnknownName, "hardware.open"),
    ("sreg = [128, 256, 512, 2048]", "sreg = [128, 512, 256, 2048]", InvalidInput, "hardware.open.sreg"),
    ("queue = 64", "queue = 64\nwidgets = 3", UnknownName, "hardware.fixed"),
])
def test_bad_study_files_name_the_field(tmp_path, old, new, error, field):
    path = variant(tmp_path, old, new)
    with pytest.raises(error) as exc:
        load_study(path)
    assert field in str(exc.value)


def test_start_over_the_area_ceiling(tmp_path):
    path = variant(tmp_path, "ceiling_mm2 = 1.11", "ceiling_mm2 = 1.0")
    with pytest.raises(InvalidInput) as exc:
        load_study(path)
    # 2048/256 needs 1.0092 mm2: the first start over 1.0 mm2 is named with its field.
    assert "starts.large" in str(exc.value) and "area ceiling" in str(exc.value)


def test_empty_program_menu(tmp_path):
    head = STUDY.read_text().partition("# Seven decode programs")[0]
    path = tmp_path / "study.toml"
    path.write_text(head)                                  # the decode menu is missing
    with pytest.raises(InvalidInput, match="programs.decode"):
        load_study(path)
    path.write_text(head.replace("[[programs.prefill]]", "[programs]\ndecode = []\n\n[[programs.prefill]]", 1))
    with pytest.raises(InvalidInput, match="programs.decode.*at least one program"):
        load_study(path)


def test_cli_json_rows_and_table(tmp_path):
    runner = CliRunner()
    png = tmp_path / "fig6.png"
    res = runner.invoke(app, ["codesign", str(STUDY), "--json", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert {"objective", "start", "method", "ratio", "inner_problems"} <= set(rows[0])
    assert {r["method"] for r in rows} == {"fixed hardware", "sequential", "random + exact inner",
                                           "wall relaxation", "wall relaxation, raw drop", "coupled wall",
                                           "joint reference"}
    assert len(rows) == 6 * 7 and png.stat().st_size > 1000
    res = runner.invoke(app, ["codesign", str(STUDY), "--plot", str(png)], env={"COLUMNS": "220"})
    assert res.exit_code == 0 and "wall relaxation" in res.output and "seed 000 Table 12" in res.output


def test_cli_bad_study_is_one_line_exit_2(tmp_path):
    path = variant(tmp_path, "sreg = [128, 256, 512, 2048]", "sreg = [256, 128]")
    res = CliRunner().invoke(app, ["codesign", str(path), "--json"])
    assert res.exit_code == 2
    assert "hardware.open.sreg" in res.output and "Traceback" not in res.output
