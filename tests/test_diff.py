"""`heatc diff A.yaml B.yaml`: cells added and removed (by pair, unit and check, not name),
score and range changes, as text and as JSON; a bad file is a clear error."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from heatc.cli import app

BASE = """\
heatmap: 1
name: a
tokenizer: {bytes: true}
categories:
  glucose: {kind: keyword, literals: [glucose]}
  sodium: {kind: keyword, literals: [sodium]}
  inr: {kind: keyword, literals: [INR]}
  mg_dl: {kind: unit, literals: [mg/dL]}
  period: {kind: punct, literals: ["."]}
triggers: {at: [period], barrier: [period]}
cells:
"""


def _write(path: Path, cells: list[str]) -> Path:
    path.write_text(BASE + "".join(f"  - {c}\n" for c in cells), encoding="utf-8")
    return path


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    a = _write(
        tmp_path / "a.yaml",
        [
            "{name: g, pair: [glucose, number], unit: mg_dl, score: 0.9, support: 10, range: [40, 600]}",
            "{name: s, pair: [sodium, number], score: 0.5, support: 3, range: [120, 160]}",
            "{name: same, pair: [glucose, number], score: 0.3, support: 4, range: [1, 2]}",
        ],
    )
    b = _write(
        tmp_path / "b.yaml",
        [
            # renamed, score moved, range moved: the same cell by pair, unit and check
            "{name: glucose_mg, pair: [glucose, number], unit: mg_dl, score: 0.7, support: 30, range: [50, 400]}",
            "{name: same, pair: [glucose, number], score: 0.302, support: 4, range: [1, 2]}",
            "{name: i, pair: [inr, number], score: 0.8, support: 12, range: [0.8, 4.5]}",
        ],
    )
    return a, b


def test_diff_text(tmp_path):
    a, b = _pair(tmp_path)
    r = CliRunner().invoke(app, ["diff", str(a), str(b)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "3 → 3 cells; 1 added, 1 removed, 1 scores and 1 ranges changed, 1 unchanged" in lines[0]
    assert "+ inr … number: score 0.800 (hot), support 12, [0.8, 4.5]" in r.output
    assert "- sodium … number: score 0.500, support 3, [120, 160]" in r.output
    assert "~ glucose … number mg_dl: 0.900 → 0.700 (-0.200)" in r.output
    assert "~ glucose … number mg_dl: [40, 600] → [50, 400] (support 10 → 30)" in r.output


def test_diff_json_and_limit(tmp_path):
    a, b = _pair(tmp_path)
    r = CliRunner().invoke(app, ["diff", str(a), str(b), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert [x["cell"] for x in d["added"]] == ["inr … number"]
    assert [x["cell"] for x in d["removed"]] == ["sodium … number"]
    assert d["score_changed"][0]["score"] == [0.9, 0.7]
    assert d["range_changed"][0]["range"] == [[40, 600], [50, 400]] and d["unchanged"] == 1
    many = _write(
        tmp_path / "c.yaml",
        [
            "{name: x, pair: [inr, number], unit: mg_dl, score: 0.2, support: 9, range: [1, 3]}",
            "{name: y, pair: [sodium, number], unit: mg_dl, score: 0.1, support: 9, range: [1, 3]}",
        ],
    )
    r = CliRunner().invoke(app, ["diff", str(a), str(many), "--limit", "1"])
    assert r.exit_code == 0 and "added (2):" in r.output and "… 1 more" in r.output


def test_diff_of_a_bad_heatmap_is_a_clear_error(tmp_path):
    a, _ = _pair(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("heatmap: 1\ncells: [", encoding="utf-8")
    r = CliRunner().invoke(app, ["diff", str(a), str(bad)])
    assert r.exit_code == 1 and "bad.yaml" in r.output and "Traceback" not in r.output


def test_diff_writes_a_side_left_open(tmp_path):
    """Learned ranges leave a side open (`range: [null, 309]`): the diff says so and does not fail."""
    a = _write(tmp_path / "a.yaml", ["{name: s, pair: [sodium, number], score: 0.5, support: 3, range: [120, 160]}"])
    b = _write(
        tmp_path / "b.yaml",
        [
            "{name: s, pair: [sodium, number], score: 0.5, support: 3, range: [null, 160]}",
            "{name: i, pair: [inr, number], score: 0.8, support: 12, range: [0.8, null]}",
        ],
    )
    r = CliRunner().invoke(app, ["diff", str(a), str(b)])
    assert r.exit_code == 0, r.output
    assert "+ inr … number: score 0.800 (hot), support 12, [0.8, inf]" in r.output
    assert "~ sodium … number: [120, 160] → [-inf, 160] (support 3 → 3)" in r.output


def test_diff_shows_a_magnitude_band_beside_its_range(tmp_path):
    """A band (`band: F`) is part of what a range cell checks: one that appears, goes or
    changes is a range change, written after the range."""
    a = _write(
        tmp_path / "a.yaml",
        [
            "{name: g, pair: [glucose, number], unit: mg_dl, score: 0.9, support: 10, range: [null, 600], band: 20}",
            "{name: s, pair: [sodium, number], unit: mg_dl, score: 0.5, support: 9, range: [1, 3]}",
        ],
    )
    b = _write(
        tmp_path / "b.yaml",
        [
            "{name: g, pair: [glucose, number], unit: mg_dl, score: 0.9, support: 10, range: [null, 600]}",
            "{name: s, pair: [sodium, number], unit: mg_dl, score: 0.5, support: 9, range: [1, 3], band: 100}",
        ],
    )
    r = CliRunner().invoke(app, ["diff", str(a), str(b)])
    assert r.exit_code == 0, r.output
    assert "0 scores and 2 ranges changed, 0 unchanged" in r.output
    assert "~ glucose … number mg_dl: [-inf, 600] within factor 20 → [-inf, 600] (support 10 → 10)" in r.output
    assert "~ sodium … number mg_dl: [1, 3] → [1, 3] within factor 100 (support 9 → 9)" in r.output
    d = json.loads(CliRunner().invoke(app, ["diff", str(a), str(b), "--json"]).output)
    assert [x["band"] for x in d["range_changed"]] == [[20, None], [None, 100]]


def test_diff_shows_a_precision_beside_its_range(tmp_path):
    """A precision (`places: P`) is part of what a range cell checks too."""
    a = _write(tmp_path / "a.yaml", ["{name: g, pair: [glucose, number], score: 0.9, support: 10, range: [null, 600]}"])
    b = _write(
        tmp_path / "b.yaml",
        ["{name: g, pair: [glucose, number], score: 0.9, support: 10, range: [null, 600], places: 0}"],
    )
    r = CliRunner().invoke(app, ["diff", str(a), str(b)])
    assert r.exit_code == 0, r.output
    assert "~ glucose … number: [-inf, 600] → [-inf, 600], places <= 0 (support 10 → 10)" in r.output
    d = json.loads(CliRunner().invoke(app, ["diff", str(a), str(b), "--json"]).output)
    assert [x["places"] for x in d["range_changed"]] == [[None, 0]]


def test_diff_keeps_a_quantity_cell_apart_from_the_keyword_s_bare_numbers(tmp_path):
    bare = "{name: same, pair: [glucose, number], score: 0.3, support: 4, range: [1, 2]}"
    a = _write(tmp_path / "a.yaml", [bare])
    quantity = (
        "{name: gq, pair: [glucose, number], dimension: mass_concentration, score: 0.9, support: 40, range: [0.2, 6]}"
    )
    b = _write(tmp_path / "b.yaml", [bare, quantity])
    r = CliRunner().invoke(app, ["diff", str(a), str(b)])
    assert r.exit_code == 0, r.output
    assert "1 → 2 cells; 1 added" in r.output.splitlines()[0]
    assert "+ glucose … number quantity(mass_concentration): score 0.900 (hot), support 40" in r.output
