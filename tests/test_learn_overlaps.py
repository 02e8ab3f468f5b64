"""Cells that read the same values (`heatc.learn.cells.overlaps`): a keyword's cell beside the cell
of every value of its kind and unit is worth what that cell does not notice."""

from __future__ import annotations

import numpy as np
from support.learn_values import spread_values as _spread

from heatc.learn.cells.budget import allocate
from heatc.learn.cells.overlaps import enclosing_cells
from heatc.learn.cells.ranges import FLAT_TAIL, count_outside, range_options
from heatc.learn.text.evidence import ITEM_END, LONE_DATE, LONE_PERCENT, CellKey, LearnedCell

MILLIONS = CellKey("", "number", "scale_million")
DOLLAR_MILLIONS = CellKey("currency", "number", "scale_million")
CALCIUM = CellKey("calcium", "number", "")


def _cell(key: CellKey, n: int) -> LearnedCell:
    return LearnedCell(key, 0.9, 2.0, 10, n, {})


def _allocated(values: dict, budget: float) -> dict:
    cells = [_cell(k, len(v.values)) for k, v in values.items()]
    options = {k: range_options(v, k, 1.5) for k, v in values.items()}
    kept, spent = allocate(cells, values, budget=budget, options=options)
    assert spent <= budget
    return {c.key: c.range for c in kept}


def test_each_keyword_cell_is_enclosed_by_the_cell_of_its_value_and_unit():
    keys = [
        MILLIONS, DOLLAR_MILLIONS, LONE_DATE, CellKey("fiscal_year", "date", ""), LONE_PERCENT,
        CellKey("increased", "percent", ""), CALCIUM, CellKey("calcium", "number", ITEM_END),
        CellKey("payment", "number", "days", "consistent"), CellKey("at_most", "number", "scale_billion"),
    ]  # fmt: skip
    cells = [_cell(k, 10) for k in keys]
    assert enclosing_cells(cells) == {1: 0, 3: 2, 5: 4}


def test_a_keyword_cell_that_its_unit_cell_covers_is_not_paid_for():
    """Every "$ N million" is an "N million" too: where both ranges notice the same slips of
    the same values, the keyword's cell adds nothing, and the budget a second rule would take
    goes to calcium. With a budget to spare it still does not run: a rule that notices nothing
    more is no rule worth its false alarms."""
    rng = np.random.default_rng(3)
    amounts = [float(x) for x in np.round(rng.uniform(20, 90, 80), 1)]
    calcium = [float(x) for x in np.round(rng.uniform(8.0, 10.5, 60), 1)]
    values = {MILLIONS: _spread(amounts), DOLLAR_MILLIONS: _spread(amounts), CALCIUM: _spread(calcium)}
    for budget in (4 * FLAT_TAIL, 100.0):
        kept = _allocated(values, budget)
        assert set(kept) == {MILLIONS, CALCIUM}
        assert count_outside(kept[MILLIONS], [v * 10 for v in amounts]) == len(amounts)


def test_a_keyword_cell_runs_where_it_notices_what_its_unit_cell_cannot():
    """ "… mg" reads every dose, 0.1 to 1,000 mg, so its range cannot notice a Keflex dose of
    250 written 25; the cell "Keflex … mg" reads 250 and 500 only, and its own range notices
    what the unit's cannot: it runs beside it, and the two notice every Keflex dose slipped."""
    rng = np.random.default_rng(4)
    keflex = [250.0, 500.0] * 30
    doses = keflex + [float(x) for x in np.round(np.geomspace(0.1, 1000, 140), 2)]
    unit, drug = CellKey("", "number", "mg"), CellKey("keflex", "number", "mg")
    values = {unit: _spread(list(rng.permutation(doses))), drug: _spread(keflex)}
    kept = _allocated(values, 100.0)
    assert drug in kept and count_outside(kept[unit], [v / 10 for v in keflex]) == 0
    for slipped in ([v * 10 for v in keflex], [v / 10 for v in keflex]):
        assert all(any(count_outside(r, [v]) for r in kept.values()) for v in slipped)


def test_a_keyword_date_cell_adds_nothing_to_the_cell_of_every_date():
    """The cell of every date notices "2119" for "2019" wherever a year is written; "fiscal
    year … 2019" is one of those years, and its own rule would notice it again."""
    rng = np.random.default_rng(5)
    years = [float(x) for x in rng.integers(2015, 2021, 120)]
    fiscal = CellKey("fiscal_year", "date", "")
    values = {LONE_DATE: _spread(years + [float(x) for x in rng.integers(2010, 2021, 200)]), fiscal: _spread(years)}
    kept = _allocated(values, 100.0)
    assert set(kept) == {LONE_DATE}
    assert count_outside(kept[LONE_DATE], [v + 100 for v in years]) == len(years)
