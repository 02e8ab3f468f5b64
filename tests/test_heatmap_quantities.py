"""Quantity cells of a heatmap (`dimension: mass`): lowered to `v:quantity(DIM)` with bounds in
units a reader knows, compiled, and run the same on every backend; a cell that cannot be a
quantity is refused with its place in the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from heatc.errors import HeatError
from heatc.heatmap.build import compile_heatmap
from heatc.heatmap.format import load_heatmap
from heatc.heatmap.lower import lower, readable
from heatc.lang.unparse import format_file
from heatc.verify.backends import run_document

HEAD = """heatmap: 1
name: doses
tokenizer: {bytes: true}
categories:
  metformin: {kind: keyword, literals: [metformin]}
  temp: {kind: keyword, literals: [temperature]}
  period: {kind: punct, literals: ["."]}
triggers: {at: [period], barrier: [period]}
cells:
"""
CELLS = """  - {pair: [metformin, number], dimension: mass, score: 0.9, support: 40, gap: 6, range: [0.25, 3]}
  - {pair: [temp, number], dimension: temperature, score: 0.8, support: 40, stats: {q01: 308.15, q99: 313.15}}
"""


def _write(tmp_path: Path, cells: str) -> Path:
    path = tmp_path / "doses.yaml"
    path.write_text(HEAD + cells, encoding="utf-8")
    return path


def test_a_quantity_cell_lowers_to_a_range_in_readable_units(tmp_path):
    text = format_file(lower(load_heatmap(_write(tmp_path, CELLS))).tree)
    assert "match metformin ..6 v:quantity(mass)\n  require v in [250 mg, 3 g]" in text
    # a temperature widens by the spread, not a factor: twice a temperature is no slip
    assert "match temp ..3 v:quantity(temperature)\n  require v in [31.85 °C, 42.85 °C]" in text


@pytest.mark.parametrize("backend", ["reference", "wasm", "native"])
def test_the_issue_s_metformin_cases_on_every_backend(tmp_path, backend):
    program = compile_heatmap(_write(tmp_path, CELLS))[0]
    want = {"metformin 500 mg.": "CONFIRMED", "metformin 0.5 g.": "CONFIRMED"}
    want |= {"metformin 500 g.": "REJECTED", "metformin 500 mcg.": "REJECTED"}
    for text, verdict in want.items():
        _, verdicts, _ = run_document(backend, program, text.encode())
        assert verdicts["metformin_mass"].name == verdict, text


@pytest.mark.parametrize(
    ("x", "dim", "shown"),
    [(0.25, "mass", (250, "mg")), (3.0, "mass", (3, "g")), (0.0005, "mass", (500, "mcg")),
     (310.15, "temperature", (37, "°C")), (0.95, "mass_concentration", (95, "mg/dL"))],
)  # fmt: skip
def test_readable_bounds(x, dim, shown):
    assert readable(x, dim) == shown


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("{pair: [metformin, number], dimension: weight, score: 0.9, range: [1, 2]}", "unknown dimension 'weight'"),
        ("{pair: [metformin, number], dimension: mass, unit: period, score: 0.9, range: [1, 2]}", "no unit"),
    ],
)
def test_a_cell_that_is_no_quantity_is_refused(tmp_path, cell, message):
    with pytest.raises(HeatError) as e:
        load_heatmap(_write(tmp_path, f"  - {cell}\n"))
    assert message in e.value.render() and "doses.yaml:10:" in e.value.render()


def test_finetune_never_mistakes_a_quantity_cell_for_the_bare_numbers():
    from heatc.learn.finetuning.merge import cell_key

    bare = {"pair": ["metformin", "number"]}
    assert cell_key({**bare, "dimension": "mass"}) != cell_key(bare)
    assert cell_key({**bare, "dimension": "mass"}) == ("metformin", "number", "quantity(mass)", "range")
