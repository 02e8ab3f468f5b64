"""Where a learned range's bounds sit: values counted as the heatmap's rules count them (never
across a sentence end), and margins beyond the clean tails scaled by each cell's own spread."""

from __future__ import annotations

import numpy as np
from test_learn import _spread_values as _spread

from heatc.learn.evidence import CellKey, collect_values
from heatc.learn.lexemes import Lexicon
from heatc.learn.ranges import log_spread, range_options, tail_margin


def test_cell_values_stop_at_a_sentence_end_as_the_heatmaps_rules_do():
    """ "fetal heart rate.,2." is a list's item 2, not a heart rate: the lowered rule (whose
    heatmap makes sentence ends barriers) never captures it, so the learner must not fit
    heart rate's range to it."""
    lexicon = Lexicon().with_keywords(["heart rate"])
    key = CellKey("heart_rate", "number", "")
    text = "Nonreassuring fetal heart rate.,2.  Protein S low. Heart rate 88."
    assert collect_values(lexicon, [key], [text])[key].values == [88.0]


def test_a_narrow_quantity_gets_a_margin_its_own_spread_needs():
    """Doses spread over three decades, and one document's tails lie far past the others';
    temperatures (Fahrenheit, a fifth in Celsius) hardly vary. One margin for both (the
    doses') puts temperature's lower bound below 9.8, "98.6" written ten times too small;
    scaled by each cell's spread, a range catches both slips of every clean temperature and
    rejects none of them."""
    rng = np.random.default_rng(3)
    doses = _spread([float(x) for x in np.round(10 ** rng.uniform(0, 3, 400), 2)])
    doses.values += [0.05, 20_000.0]
    doses.per_document[0] += [0.05, 20_000.0]
    fahrenheit = np.round(rng.uniform(96.0, 104.0, 240), 1)
    celsius = np.round(rng.uniform(35.5, 40.0, 60), 1)
    temperatures = _spread([float(x) for x in rng.permutation(np.concatenate([fahrenheit, celsius]))])
    dose, temperature = CellKey("dose", "number", "mg"), CellKey("temperature", "number", "")
    margin = tail_margin([(dose, doses), (temperature, temperatures)])
    assert log_spread(temperatures.values) < 0.5 < 2 < log_spread(doses.values)
    assert margin.factor(temperatures.values) < margin.factor(doses.values) <= margin.ceiling

    def best_power(factor: float) -> float:
        return max(o.power for o in range_options(temperatures, temperature, factor) if o.rejected == 0)

    assert best_power(margin.ceiling) < 0.75 and best_power(margin.factor(temperatures.values)) == 1.0


def test_stray_values_do_not_widen_a_cells_spread():
    """ "hemoglobin A1c" gives hemoglobin a few 1s: its spread is that of its hemoglobins."""
    values = [1.0] * 4 + [float(x) for x in np.linspace(8, 16, 96)]
    assert log_spread(values) < 0.35 < float(np.log10(16 / 1))


def test_a_range_open_above_gets_an_example_it_rejects(tmp_path):
    """`vitamin … number` with range [0.25, null] rejects no large value: its rejecting
    example is a value a thousand times below its lower bound, and `heatc check` passes."""
    from heatc.heatmap.build import compile_heatmap
    from heatc.learn.emit import heatmap_document, write_heatmap
    from heatc.learn.evidence import LearnedCell
    from heatc.learn.ranges import value_stats
    from heatc.verify.expect import check_expects

    stats = value_stats([1.0, 12.0, 12.0, 20.0, 50_000.0])
    cell = LearnedCell(CellKey("vitamin", "number", ""), 0.99, 2.6, 6, 60, stats, range=(0.25, None))
    doc = heatmap_document(
        name="learned", title="t", lexicon=Lexicon().with_keywords(["vitamin"]), cells=[cell], provenance={},
        sensitivity=0.25, rule_files=[], tokenizer={"bytes": True},
    )  # fmt: skip
    assert doc["expects"] == [
        {"text": "vitamin 12.", "passes": ["vitamin_value"]},
        {"text": "vitamin 0.00025.", "rejects": ["vitamin_value"]},
    ]
    path = tmp_path / "learned.yaml"
    write_heatmap(path, doc, "")
    from heatc.backends import run_document

    program = compile_heatmap(path)[0]
    assert check_expects(program, lambda p, d: run_document("reference", p, d)[:2]) == []
