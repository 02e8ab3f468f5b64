"""Where a learned range's bounds sit: values counted as the heatmap's rules count them (never
across a sentence end), and margins beyond the clean tails scaled by each cell's own spread."""

from __future__ import annotations

import numpy as np
import pytest
from support.learn_values import spread_values as _spread

from heatc.learn.cells.ranges import count_outside, log_spread, range_options, tail_margin
from heatc.learn.text.evidence import CellKey, collect_values
from heatc.learn.text.lexemes import Lexicon


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
    from heatc.learn.cells.ranges import value_stats
    from heatc.learn.heatmaps.emit import heatmap_document, write_heatmap
    from heatc.learn.text.evidence import LearnedCell
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
    from heatc.verify.backends import run_document

    program = compile_heatmap(path)[0]
    assert check_expects(program, lambda p, d: run_document("reference", p, d)[:2]) == []


def _labs_and_rates(moving: bool):
    """Twelve lab cells over 40 documents, and respiratory rates 12–28 (two 40s). With
    `moving`, two documents of each lab come from another population, values 2.5 times as
    large: what a cell's documents not seen may hold beyond its tail (a newborn's respiratory
    rate of 60 where the corpus's adults write 12 to 40)."""
    from heatc.learn.text.evidence import CellValues

    rng = np.random.default_rng(5)
    values = {}
    for i in range(12):
        cv = CellValues()
        for d in range(40):
            scale = 2.5 if moving and d in (i, i + 20) else 1.0
            for v in np.round(np.exp(rng.normal(np.log(10 * (i + 1)), 0.15, 4)) * scale, 1):
                cv.values.append(float(v))
                cv.per_document[d].append(float(v))
        values[CellKey(f"lab{i}", "number", "")] = cv
    rates = CellKey("respiratory_rate", "number", "")
    values[rates] = _spread([float(x) for x in rng.integers(12, 29, 150)] + [40.0, 40.0])
    return values, rates


def test_a_bound_sits_as_far_past_its_values_as_other_cells_documents_go_past_theirs():
    """A cell's own folds say little of a population its documents happen not to show; every
    cell's folds together say how far the next documents' values go past the largest seen.
    Where other cells' documents go 2.5 times past their tails, respiratory rates' upper
    bound accepts 2.5 times its largest value and still rejects every rate written ten times
    too large; where no document goes past, the bound stays nearer. A flat half false alarm
    per bound prices it alike either way (and at this budget cannot pay for the rate's range)."""
    from support.learn_scores import scored as _scored

    from heatc.learn.cells.budget import CellContext, cell_table
    from heatc.learn.config import CellsConfig

    uppers = {}
    for moving in (False, True):
        values, rates = _labs_and_rates(moving)
        margin = tail_margin(list(values.items()))
        x = values[rates].values
        assert margin.unseen((None, 40.0), x) > margin.unseen((None, 60.0), x) >= margin.unseen((None, 100.0), x)
        cells = cell_table(
            values,
            *_scored(dict.fromkeys(values, 3.5)),
            CellsConfig(min_support=5, min_probes=3, sensitivity=0.75),
            CellContext(sentences=1000),
        )
        [cell] = [c for c in cells if c.key == rates]
        uppers[moving] = cell.range[1]
        assert count_outside(cell.range, [v * 10 for v in x]) == len(x)
    assert uppers[False] < 100 <= 2.5 * 40 <= uppers[True]


def test_a_shares_bound_at_the_whole_is_priced_as_a_prior_not_a_tail():
    """No document's share goes past 100 %, however near 100 a corpus's shares come: the
    bound at the whole costs `FLAT_TAIL`, while a bound fitted as near its largest value
    costs what every cell's tails say such a bound costs (here more)."""
    from heatc.learn.cells.ranges import FLAT_TAIL, PERCENT_WHOLE

    values, _ = _labs_and_rates(True)
    margin = tail_margin(list(values.items()))
    shares = _spread([float(x) for x in np.linspace(20.0, 99.0, 120)])
    options = range_options(shares, CellKey("margin", "percent", ""), 1.5, tails=margin)
    whole = [o for o in options if o.bounds[0] is None and o.bounds[1] == PERCENT_WHOLE]
    assert whole and all(o.unseen == FLAT_TAIL for o in whole)
    assert margin.unseen((None, PERCENT_WHOLE), shares.values) > FLAT_TAIL
    # a clean value past the whole in the corpus: one more in as much unseen text
    grown = _spread([float(x) for x in np.linspace(20.0, 99.0, 119)] + [150.0])
    options = range_options(grown, CellKey("increased", "percent", ""), 1.5, tails=margin)
    whole = [o for o in options if o.bounds[0] is None and o.bounds[1] == PERCENT_WHOLE]
    assert whole and all(o.unseen == FLAT_TAIL + 1 for o in whole)


def test_a_quantity_that_hardly_varies_keeps_a_bound_below_its_values_slipped():
    """Temperatures in Fahrenheit (96–104), a twentieth in Celsius and "temperature over the
    past 24 hours" three times. Tails go about 6 spreads past the other folds' on half of
    MTSamples (`TailMargin.excursion`): with the spread floored at a tenth of a decade, that
    put every lower bound under 9.8, "98.6" written ten times too small. Floored at a
    twentieth, a candidate accepts every Celsius value and rejects both units' temperatures
    slipped."""
    from heatc.learn.cells.ranges import SPREAD_FLOOR, TailMargin

    rng = np.random.default_rng(5)
    fahrenheit = np.round(rng.uniform(96.0, 104.0, 180), 1)
    celsius = np.round(rng.uniform(35.5, 38.0, 9), 1)
    values = [*rng.permutation(np.concatenate([fahrenheit, celsius])).tolist(), 24.0, 24.0, 24.0]
    temperatures = _spread([float(x) for x in values])
    assert log_spread(temperatures.values) == SPREAD_FLOOR  # (Fahrenheit's q05–q95 spans 0.03)
    margin = TailMargin(excursion=6.0, ceiling=11.0)
    options = range_options(temperatures, CellKey("temperature", "number", ""), margin.factor(temperatures.values))
    slipped = [float(x) / 10 for x in np.concatenate([fahrenheit, celsius])]
    assert any(o.rejected <= 3 and count_outside(o.bounds, slipped) == len(slipped) and o.power > 0.95 for o in options)


def test_a_cut_past_a_few_clean_values_is_charged_the_noise_of_its_count():
    """Estimated blood losses of 5–600 mL and, in two documents, 900 and 1000: the bound at
    738 catches more slips than one past 1000 and rejects the two. Charged its count and its
    tails (3), it fits a budget of four false alarms; but a count of two says little (the held-out
    documents wrote 900 to 2500 mL eight times), and charged its noise besides it does not."""
    from support.learn_scores import scored as _scored

    from heatc.learn.cells.budget import CUT_NOISE, CellContext, cell_table
    from heatc.learn.config import CellsConfig

    key = CellKey("blood_loss", "number", "ml")
    values = {key: _spread([*sorted(float(x) for x in np.round(np.geomspace(5, 600, 230))), 900.0, 1000.0])}
    scored = _scored({key: 3.5})

    def chosen(budget: float):
        [cell] = cell_table(
            values,
            *scored,
            CellsConfig(min_support=5, min_probes=3, alarm_budget=budget, sensitivity=0.75),
            CellContext(sentences=100),
        )
        return cell

    cut = chosen(0.05)  # a budget the cut fits, noise and all
    assert (
        cut.rejected == 2 and cut.range[1] < 900 and cut.charged == pytest.approx(3 + CUT_NOISE * np.sqrt(2), abs=1e-4)
    )
    kept = chosen(0.04)
    assert kept.rejected == 0 and kept.range[1] > 1000
