"""Cells that read the same values: what a cell is worth beside another that checks them too.

Two kinds of cell read values another cell reads as well, and the budget (`budget.allocate`)
must not pay twice for noticing one slip:

- a value's cell and its cell of the value written bare ("sodium … number" and "sodium …
  number ,"): one group, chosen together (`joint_choices`);
- a keyword's cell and the cell that reads every value of its kind and unit — "$ … million"
  and "… million", "fiscal year … date" and the cell of every date, "increased … percent" and
  the cell of every percentage (`enclosing_cells`): the keyword's cell is worth only the slips
  the other's range and band do not notice already (`marginal_choices`).

A choice is the tuple `budget.allocate` builds: (worth, cost, bounds, rejections in the corpus,
bounds held, width, false-alarm rate, (band factor, the band's rejections)).

Public surface: `joint_choices`, `enclosing_cells`, `marginal_choices`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from heatc.learn.cells.bands import SLIP as BAND_SLIP
from heatc.learn.cells.bands import band_notices
from heatc.learn.cells.ranges import fitted_values, slips, slips_noticed
from heatc.learn.text.evidence import CellValues, LearnedCell


def _frontier(ch: list[tuple]) -> list[int]:
    """The choices (indices) that some λ could pick: by cost, each worth more than every
    cheaper one (of those alike in both, the one `allocate` prefers); "left out" first."""
    order = sorted(range(1, len(ch)), key=lambda k: (ch[k][1], -ch[k][0], ch[k][4], ch[k][5]))
    out, top = [0], ch[0][0]
    for k in order:
        if ch[k][0] > top:
            out.append(k)
            top = ch[k][0]
    return out


def joint_choices(cells: list[LearnedCell], choices: list[list[tuple]], values: dict, bands) -> list[list[tuple]]:
    """The solver's choices per group of cells. A value's cell ("sodium … number") and its cell
    of the value written bare ("sodium … number ,") are one group: the bare cell's values are
    the value cell's too, so a slip of one of them that both ranges notice is worth once, not
    twice. Where nearly every value is written bare (chloride's lab values), the bare cell only
    pays for a second rule that notices what the first does; where the value cell also reads
    doses ("sodium bicarbonate 650 mg"), the bare cell's narrower range is worth what the
    value cell's cannot notice. Each pair of choices (either left out) is offered, from each
    cell's `_frontier`, worth the sum less the slips of the bare values both notice. Every
    other cell is a group of its own. A group's choice: (worth, cost, -, -, bounds held,
    width, ((cell, its choice), …))."""
    index = {c.key: i for i, c in enumerate(cells)}

    def plain_range(c: LearnedCell) -> bool:
        return c.key.check == "range" and not c.guards and not (bands or {}).get(c.key)

    partner: dict[int, int] = {}
    for j, c in enumerate(cells):
        i = index.get(dataclasses.replace(c.key, unit=""))
        if c.key.ends_value and i is not None and plain_range(c) and plain_range(cells[i]):
            partner[i] = j
    out, paired = [], set(partner.values())
    for i, ch in enumerate(choices):
        if i in paired:
            continue
        if i not in partner:
            out.append([(x[0], x[1], None, None, x[4], x[5], ((i, k),)) for k, x in enumerate(ch)])
            continue
        j = partner[i]
        bare = np.asarray(fitted_values(cells[j].key, values[cells[j].key]).values, dtype=np.float64)
        mine = {a: slips_noticed(ch[a][2], bare, slips(cells[i].key)) for a in _frontier(ch)[1:]}
        theirs = {b: slips_noticed(choices[j][b][2], bare, slips(cells[j].key)) for b in _frontier(choices[j])[1:]}
        group = []
        for a in [0, *mine]:
            for b in [0, *theirs]:
                x, y = ch[a], choices[j][b]
                # the bare values' slips both ranges notice
                both = len(bare) * float((mine[a] & theirs[b]).mean()) / 2 if a and b and len(bare) else 0.0
                group.append((x[0] + y[0] - both, x[1] + y[1], None, None, x[4] + y[4], x[5] + y[5], ((i, a), (j, b))))
        out.append(group)
    return out


def enclosing_cells(cells: list[LearnedCell]) -> dict[int, int]:
    """Per keyword range cell (its index), the cell that reads each of its values too (index):
    the cell of its value and unit without the keyword — "… million" for "$ … million", the
    cell of every date for "fiscal year … date". A cell of values written bare has its value
    cell for that (`joint_choices`); guards and consistency cells have none."""
    index = {c.key: i for i, c in enumerate(cells)}
    out = {}
    for i, c in enumerate(cells):
        if not c.key.keyword or c.key.check != "range" or c.guards or c.key.ends_value:
            continue
        j = index.get(dataclasses.replace(c.key, keyword=""))
        if j is not None and not cells[j].guards:
            out[i] = j
    return out


def marginal_choices(
    cell: LearnedCell, cv: CellValues, choices: list[tuple], outer_cv: CellValues, chosen: tuple
) -> list[tuple]:
    """`choices` of a keyword cell, each worth less the slips of its values that its enclosing
    cell (values `outer_cv`, running with the choice `chosen`) notices as well — by its range or by its
    band. The unit of worth is `allocate`'s: a range's noticed slips averaged over the slips,
    times the values, halved; a band's noticed thousandfold slips counted, halved."""
    fit = fitted_values(cell.key, cv)
    factors = slips(cell.key)
    x = np.asarray([v for vs in fit.per_document.values() for v in vs], dtype=np.float64)
    if not len(x):
        return choices
    theirs = _noticed(x, fit, factors, chosen[2], chosen[7][0], outer_cv)
    # what the cell's own band of each factor notices that the enclosing cell does too (many
    # choices share a factor: each range, once more with each band)
    banded = {
        factor: float((_band_noticed(x, fit, factors, factor, cv) & theirs).sum()) / 2
        for factor in {c[7][0] for c in choices if c[7][0]}
    }
    out = []
    for c in choices:
        if c[2] is None:  # left out
            out.append(c)
            continue
        both = float((slips_noticed(c[2], x, factors) & theirs).mean()) * len(x) / 2 + banded.get(c[7][0], 0.0)
        out.append((max(c[0] - both, 0.0), *c[1:]))
    return out


def _noticed(x: np.ndarray, fit: CellValues, factors, bounds, band: int, band_cv: CellValues) -> np.ndarray:
    """Per value of `fit` (rows, in `x`'s order) and slip (`slips_noticed`'s columns): whether a
    rule with these bounds, or its band of this factor over `band_cv`'s documents, notices it."""
    ranged = slips_noticed(bounds, x, factors)
    return ranged | _band_noticed(x, fit, factors, band, band_cv) if band else ranged


def _band_noticed(x: np.ndarray, fit: CellValues, factors, band: int, band_cv: CellValues) -> np.ndarray:
    """Per value of `fit`, document by document as `x` lists them (rows; `slips_noticed`'s
    columns): whether a band of `band` over `band_cv`'s documents notices it written a thousand
    times larger or smaller against the document's other values (`bands.slips_noticed`, value
    by value)."""
    out = slips_noticed((None, None), x, factors)  # (nothing: every column False)
    if BAND_SLIP not in factors:
        return out
    col = 2 * factors.index(BAND_SLIP)
    row = 0
    for d, vs in fit.per_document.items():
        others_all = [v for v in band_cv.per_document.get(d, ()) if v > 0]
        for v in vs:
            if v > 0:
                others = list(others_all)
                if v in others:  # (the value itself, whichever of its copies)
                    others.remove(v)
                if others:
                    out[row, col : col + 2] = band_notices(v, others, band, BAND_SLIP)
            row += 1
    return out
