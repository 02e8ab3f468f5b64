"""The learner's cells keyed on a keyword and a dimension (heatc/learn/cells/dimensions.py): which
units have a dimension, which cells merge, values converted to the base unit before a range
is fitted, a range learned from doses in mg that rejects the same doses in g and mcg, the
swaps a dimension's range is worth, and the cell written, lowered and run on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from support.learn_scores import scored as _scored

from heatc.heatmap.build import compile_heatmap
from heatc.heatmap.format import load_heatmap
from heatc.heatmap.lower import lower
from heatc.lang.unparse import format_file
from heatc.learn.cells.budget import CellContext, cell_table
from heatc.learn.cells.dimensions import (
    LEARNED_DIMENSIONS,
    dimension_cells,
    dimension_scores,
    dimension_swaps,
    guards_outside,
    unit_dimensions,
    unit_scales,
)
from heatc.learn.cells.ranges import value_stats
from heatc.learn.config import CellsConfig
from heatc.learn.heatmaps.emit import heatmap_document, write_heatmap
from heatc.learn.text.evidence import CellKey, CellValues, LearnedCell, collect_values
from heatc.learn.text.lexemes import Lexicon
from heatc.verify.backends import run_document

MASS = CellKey("metformin", "number", "", dimension="mass")


def _lexicon() -> Lexicon:
    return Lexicon().with_keywords(["metformin", "lasix", "glucose"])


@pytest.mark.parametrize(
    ("unit", "dimension"),
    [("mg", "mass"), ("mcg", "mass"), ("grams", "mass"), ("kg", "mass"), ("pounds", "mass"), ("ml", "volume"),
     ("liters", "volume"), ("liter_symbol", "volume"), ("mg_dl", "mass_concentration"), ("g_dl", "mass_concentration"),
     ("mmol_l", "amount_concentration"), ("meq_l", "equivalent_concentration"), ("mm_hg", "pressure"),
     ("bpm", "rate"), ("per_minute", "rate"), ("cm", "length"), ("days", "time"), ("weeks", "time")],
)  # fmt: skip
def test_seed_units_the_table_knows_have_their_dimension(unit, dimension):
    assert unit_dimensions(_lexicon())[unit] == dimension


@pytest.mark.parametrize(
    "unit",
    # not in the table (IU, U/L, mg/kg, months, scale words), or on an interval scale (°C, °F)
    ["units", "u_l", "mg_kg", "mcg_kg", "mm_hour", "months", "years", "business_days", "scale_million", "celsius",
     "fahrenheit", "degrees"],
)  # fmt: skip
def test_units_the_table_does_not_know_keep_their_cells(unit):
    assert unit not in unit_dimensions(_lexicon())
    assert "temperature" not in LEARNED_DIMENSIONS and "percent" not in LEARNED_DIMENSIONS


def test_a_keyword_s_unit_cells_of_one_dimension_merge_and_the_rest_stay():
    lexicon = _lexicon().with_keywords(["below"])
    groups = lexicon.groups()
    candidates = [
        CellKey("metformin", "number", "mg"),
        CellKey("metformin", "number", "grams"),
        CellKey("metformin", "number", ""),  # bare values: no unit to convert
        CellKey("metformin", "number", "mg_kg"),  # no dimension
        CellKey("metformin", "number", "ml"),  # another dimension: a cell of its own
        CellKey("", "number", "mg"),  # every value in mg: no keyword
        CellKey("daily", "number", "mg", after=True),  # read after the unit: a guard's evidence
        CellKey("at_most", "number", "mg"),  # a constraint word, not a keyword
        CellKey("metformin", "number", "mg", "consistent"),
    ]
    merged = dimension_cells(candidates, groups, unit_dimensions(lexicon))
    assert merged == {
        MASS: [CellKey("metformin", "number", "grams"), CellKey("metformin", "number", "mg")],
        CellKey("metformin", "number", "", dimension="volume"): [CellKey("metformin", "number", "ml")],
    }
    assert MASS.name == "metformin_mass" and MASS.pattern() == "metformin ..3 v:quantity(mass)"
    assert not MASS.has_unit and not MASS.ends_value


def test_a_dimension_cell_collects_its_values_in_the_base_unit():
    text = (
        "Metformin 500 mg twice daily. Metformin 0.5 g daily. metformin 1,000 mg. Metformin 850mg, metformin 20 units."
    )
    got = collect_values(_lexicon(), [MASS, CellKey("metformin", "number", "mg")], [text])
    assert got[MASS].values == [0.5, 0.5, 1.0, 0.85]  # grams; "20 units" is no mass
    assert got[CellKey("metformin", "number", "mg")].values == [500.0, 1000.0, 850.0]
    assert dict(got[MASS].with_unit) == {}  # a quantity has its unit: nothing is fitted apart


def test_a_range_learned_from_doses_in_mg_rejects_them_in_g_and_mcg():
    rng = np.random.default_rng(3)
    doses_mg = rng.choice([500.0, 850.0, 1000.0, 500.0, 1000.0, 750.0], size=120)
    cv = CellValues()
    for d, v in enumerate(doses_mg):
        cv.values.append(float(v) / 1000)  # what the quantity capture holds: grams
        cv.per_document[d % 40].append(float(v) / 1000)
    scores, strengths = _scored({MASS: 3.0})
    [cell] = cell_table(
        {MASS: cv},
        scores,
        strengths,
        CellsConfig(min_support=20, min_probes=3, sensitivity=0.0),
        CellContext(sentences=400),
    )
    lo, hi = cell.range
    lo = 0.0 if lo is None else lo
    hi = float("inf") if hi is None else hi
    assert lo <= 0.5 and 1.0 <= hi  # the doses written in mg pass in any unit of mass
    for slipped in (500.0, 1000.0, 500e-6, 1000e-6):  # 500 g, 1000 g, 500 mcg, 1000 mcg
        assert not lo <= slipped <= hi, slipped


def test_a_dimension_cell_takes_its_best_unit_cell_s_score():
    mg, g = CellKey("metformin", "number", "mg"), CellKey("metformin", "number", "grams")
    scores, strengths = {mg: 0.6, g: 0.9}, {mg: (2.0, 5), g: (3.0, 4)}
    got_scores, got_strengths = dimension_scores({MASS: [g, mg]}, scores, strengths)
    assert got_scores == {MASS: 0.9} and got_strengths == {MASS: (3.0, 9)}
    assert dimension_scores({MASS: [g, mg]}, {}, {}) == ({}, {})  # none scored: no cell


def test_the_swaps_a_dimension_range_is_worth_are_its_values_read_in_the_swapped_unit():
    lexicon = _lexicon()
    dims = unit_dimensions(lexicon)
    mg = CellKey("metformin", "number", "mg")
    cv = CellValues(values=[500.0, 1000.0])
    swaps = {"mg": {"grams": 0.75, "mcg": 0.25, "cm": 0.1}}  # cm: another dimension, no source
    [(share_g, in_g), (share_mcg, in_mcg)] = dimension_swaps({MASS: [mg]}, {mg: cv}, swaps, dims, unit_scales(lexicon, dims))[MASS]  # fmt: skip
    assert share_g == 0.75 and in_g == pytest.approx([500.0, 1000.0])  # "500 mg" written "500 g": 500 g
    assert share_mcg == 0.25 and in_mcg == pytest.approx([500e-6, 1000e-6])


def _heatmap(tmp_path, range_=(0.25, 3.0)):
    stats = value_stats([0.5, 0.85, 1.0] * 20)
    cell = LearnedCell(MASS, 0.9, 2.0, 12, 60, stats, range=range_)
    doc = heatmap_document(
        name="learned", title="t", lexicon=_lexicon(), cells=[cell], provenance={}, sensitivity=0.0,
        rule_files=[], tokenizer={"bytes": True},
    )  # fmt: skip
    path = tmp_path / "learned.yaml"
    write_heatmap(path, doc, "")
    return path, doc


def test_a_dimension_cell_is_written_and_lowered_in_readable_units(tmp_path):
    path, doc = _heatmap(tmp_path)
    [entry] = doc["cells"]
    assert entry["dimension"] == "mass" and entry["pair"] == ["metformin", "number"] and "unit" not in entry
    assert "values 500 mg–1 g" in entry["description"]
    hm = load_heatmap(path)
    assert hm.cells[0].dimension == "mass" and hm.cells[0].range == (0.25, 3.0)
    text = format_file(lower(hm).tree)
    assert "rule metformin_mass" in text
    assert "match metformin ..3 v:quantity(mass)\n  require v in [250 mg, 3 g]" in text


@pytest.mark.parametrize("backend", ["reference", "wasm"])
def test_a_learned_dimension_cell_rejects_slipped_units(tmp_path, backend):
    path, _ = _heatmap(tmp_path)
    program = compile_heatmap(path)[0]
    want = {"Metformin 500 mg.": "CONFIRMED", "Metformin 0.5 g.": "CONFIRMED", "Metformin 1,000 mg.": "CONFIRMED"}
    want |= {"Metformin 500 g.": "REJECTED", "Metformin 500 mcg.": "REJECTED", "metformin 850 kg.": "REJECTED"}
    for text, verdict in want.items():
        _, verdicts, _ = run_document(backend, program, text.encode())
        assert verdicts["metformin_mass"].name == verdict, text


def test_a_dimension_range_stands_for_the_guards_of_its_own_dimension():
    dims = unit_dimensions(_lexicon())
    mg = CellKey("metformin", "number", "mg")
    g_guard, ml_guard, meq_guard = (CellKey("metformin", "number", u) for u in ("grams", "ml", "meq_l"))
    other = CellKey("lasix", "number", "mg")  # no dimension cell: keeps its guard
    guarded = {g_guard: [(mg, 0.7), (other, 0.5)], ml_guard: [(mg, 0.1)], meq_guard: [(mg, 0.1)]}
    got = guards_outside(guarded, {mg}, dims)
    assert got == {g_guard: [(other, 0.5)], ml_guard: [(mg, 0.1)], meq_guard: [(mg, 0.1)]}
    assert guards_outside({g_guard: [(mg, 0.7)]}, {mg}, dims) == {}


def test_a_base_unit_cell_is_relearned_by_the_domain_s_dimension_cell():
    """heatc finetune: a domain cell `metformin … quantity(mass)` reads the values of the base's
    `metformin … mg` and `… g` cells (and its guard of mcg) — they are re-learned, not kept
    beside it; a domain cell seen on few values is widened to the base's range, in grams."""
    from heatc.learn.finetuning.merge import merge_cells

    lexicon = _lexicon()
    domain_cell = {"name": "metformin_mass", "pair": ["metformin", "number"], "dimension": "mass",
                   "range": [0.4, 1.0], "support": 10, "description": "learned"}  # fmt: skip
    base_cells = [
        {"name": "metformin_mg", "pair": ["metformin", "number"], "unit": "mg", "range": [250, 2550], "support": 90},
        {"name": "metformin_grams", "pair": ["metformin", "number"], "unit": "grams", "range": [0, 0], "support": 90},
        {"name": "metformin_ml", "pair": ["metformin", "number"], "unit": "ml", "range": [1, 50], "support": 30},
        {"name": "mg_then_daily", "pair": ["number", "metformin"], "unit": "mg", "range": [0, 0], "support": 40},
    ]  # fmt: skip
    domain = {"categories": {}, "cells": [dict(domain_cell)]}
    base = {"categories": {"ml": {"kind": "unit", "literals": ["mL"]}}, "cells": base_cells}
    merged, kept, _, counts = merge_cells(domain, base, lexicon, keep_unused=True)
    assert counts["relearned"] == 2 and kept == ["metformin_ml", "mg_then_daily"]
    assert merged["cells"][0]["range"] == pytest.approx([0.25, 2.55])  # the hull, in grams (no guard's [0, 0])


def test_a_quantity_s_open_side_may_close_where_a_unit_a_prefix_off_lands():
    """A range open below ("lasix … ≤ 140 mg") passes "lasix 40 mcg"; each one-sided option of a
    quantity is offered again with that side closed 30 times past its values, which notices a
    value a thousand times off and nothing ten times off."""
    from heatc.learn.cells.ranges import PREFIX_MARGIN, range_options

    cv = CellValues()
    for d in range(40):
        for v in (0.02, 0.04, 0.08):
            cv.values.append(v)
            cv.per_document[d].append(v)
    bounds = {o.bounds for o in range_options(cv, MASS)}
    assert any(lo is None for lo, _ in bounds)  # the open side is still offered
    closed = [(lo, hi) for lo, hi in bounds if lo is not None and lo <= 0.02 / PREFIX_MARGIN]
    assert closed and all(lo > 0.02 / 1000 for lo, _ in closed)  # "lasix 20 mcg" rejected
    assert not {o.bounds for o in range_options(cv, CellKey("lasix", "number", "mg"))} & set(closed)


def test_a_family_keeps_its_cells_per_unit_and_its_guards():
    lexicon = _lexicon().with_families({"keywords_mg": ["lasix", "glucose"]})
    groups = lexicon.groups()
    candidates = [CellKey("keywords_mg", "number", "mg"), CellKey("metformin", "number", "mg")]
    merged = dimension_cells(candidates, groups, unit_dimensions(lexicon), families={"keywords_mg"})
    assert list(merged) == [MASS]
