"""Value ranges: statistics of a cell's clean values, the ranges a rule could hold
(bounds beyond the clean values' tails by a margin, or a side left open), how many clean
values each rejects — in the corpus, cross-validated, and past its bounds in unseen
documents as every cell's folds show (`TailMargin.unseen`) — and how much of the error it
exists to catch (a value ten times too large or too small) it would notice.

A bound is `None` where the range leaves that side open: the bound no error needs (a
lower bound that only rejects small doses, when no slip lands below it) is left out.

Public surface: `inliers`, `value_stats`, `conflicts`, `rejected_values`, `rejected_share`,
`Bounds`, `RangeOption`, `range_options`, `tail_margin`, `TailMargin`, `log_spread`,
`fitted_values`, `slip_power`, `slips_noticed`, `slips`, `is_years`, `outside`, `count_outside`,
`restated_option`, `log_width`, `n_bounds`, `PERCENT_WHOLE`, `FLAT_TAIL`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from heatc.heatmap.format import DEFAULT_MARGIN_FACTOR, DEFAULT_MARGIN_SPREAD, Stats
from heatc.heatmap.lower import margin_range, round_out
from heatc.learn.config import MIN_FOLD_VALUES
from heatc.learn.text.evidence import CellKey, CellValues

OUTLIER_FENCE = 3.0  # interquartile ranges, in log10 space


def inliers(values: list[float]) -> np.ndarray:
    """The values without far outliers: outside Tukey fences of 3 IQR, in log space when
    nearly all values are positive (a stray 0 is then an outlier too). A rule pattern also
    captures what it was not meant for — a platelet count after "hematocrit", a typo — and a
    range read from such quantiles would describe nothing."""
    a = np.asarray(values, dtype=np.float64)
    if (a > 0).mean() >= 0.95:
        a = a[a > 0]
        x = np.log10(a)
        floor = 0.05
    else:
        x, floor = a, 1e-9
    q1, q3 = np.quantile(x, [0.25, 0.75])
    spread = max(q3 - q1, floor)
    return a[(x >= q1 - OUTLIER_FENCE * spread) & (x <= q3 + OUTLIER_FENCE * spread)]


def value_stats(values: list[float], fit: list[float] | None = None) -> dict:
    """n, min and max of every value; the quantiles of the inliers (of `fit`, if given: the
    values written without a unit, `CellValues.bare`)."""
    a = np.asarray(values, dtype=np.float64)
    q = np.quantile(inliers(values if fit is None else fit), [0.01, 0.05, 0.5, 0.95, 0.99])
    return {
        "n": len(a), "min": _round(a.min()), "q01": _round(q[0]), "q05": _round(q[1]), "q50": _round(q[2]),
        "q95": _round(q[3]), "q99": _round(q[4]), "max": _round(a.max()),
    }  # fmt: skip


def _round(x: float) -> float:
    """Six significant figures: the statistics are descriptive, the range is derived later."""
    return float(f"{float(x):.6g}")


def conflicts(cv: CellValues) -> tuple[int, int]:
    """(values that differ from their document's first value — the matches a `consistent`
    rule would reject in these clean documents —, documents with two values or more)."""
    rejected = sum(sum(v != vs[0] for v in vs[1:]) for vs in cv.per_document.values())
    return rejected, sum(len(vs) >= 2 for vs in cv.per_document.values())


def rejected_values(stats: dict, values: list[float]) -> int:
    """How many of `values` fall outside the range `heatc lower` derives from `stats`."""
    lo, hi = margin_range(Stats(**stats), DEFAULT_MARGIN_SPREAD, DEFAULT_MARGIN_FACTOR)
    return sum(not lo <= v <= hi for v in values)


Bounds = tuple[float | None, float | None]  # None: that side is open


def _closed(bounds: Bounds) -> tuple[float, float]:
    lo, hi = bounds
    return (-math.inf if lo is None else lo), (math.inf if hi is None else hi)


def outside(bounds: Bounds, values) -> np.ndarray:
    """Per value, whether a rule with these bounds rejects it."""
    lo, hi = _closed(bounds)
    a = np.asarray(values, dtype=np.float64)
    return (a < lo) | (a > hi)


def count_outside(bounds: Bounds, values) -> int:
    return int(outside(bounds, values).sum())


def n_bounds(bounds: Bounds) -> int:
    return sum(b is not None for b in bounds)


def rejected_share(stats: dict, values: list[float]) -> float:
    """The share of `values` outside the range `heatc lower` derives from `stats`."""
    return rejected_values(stats, values) / max(len(values), 1)


# quantile levels a bound is read from at each end: the clean tail (0 is the extreme value);
# a cut past a few stray values is priced by the false alarms it costs
RANGE_LEVELS = (0.0, 0.0025, 0.005, 0.01, 0.025, 0.05)
# the margin beyond the tail, in log space (lo / f, hi × f), in multiples of `tail_margin`
RANGE_FACTORS = (1.0, 1.5, 2.0, 3.0)
TAIL_QUANTILE = 0.99  # `tail_margin`: the share of the documents' tails a margin covers
# the margin beyond the tail in widths of the values' central 90 % (q95 − q05): for quantities
# whose values sit far from 0 (years), where a factor of 1.5 would reach past any error
RANGE_WIDTHS = (0.5, 1.0, 2.0, 4.0)
# decades: `log_spread` of a cell whose values hardly vary. Times the excursion tails need
# (about 6 spreads), a tenth of a decade put temperature's lower bound (95.8 °F, a few °C
# and "over the past 24 hours") under 9.8 — "98.6" written ten times too small passed
SPREAD_FLOOR = 0.05
PERCENT_WHOLE = 100.0  # the upper bound of a share (`range_options`)
SLIP = 10.0  # the error a range exists to catch: a value written ten times too large or too small
# ... and, for an amount with a scale word after it ("$4.2 million"), a scale slipped as well:
# thousands written for millions are a thousand times off
SCALE_SLIP = 1000.0
SCALE_UNITS = frozenset({"scale_thousand", "scale_million", "scale_billion"})
# A quantity's range (`CellKey.dimension`) exists to catch a unit a prefix off as well — mg
# written for g or mcg, mL for L: a thousand times off in the dimension's base unit — and may
# close a side it would leave open this far past its values, the geometric middle of the
# thousand (`range_options`); what that is worth, the swaps of its units say (`slips`)
PREFIX_MARGIN = 30.0


def slips(key: CellKey | None) -> tuple[float, ...]:
    """The factors of the errors a cell's range exists to catch: ten; for an amount with a
    scale word, a thousand too. (A quantity's unit a prefix off is worth what the swaps of
    its units say, `dimensions.dimension_swaps`: counted as a slip of every value besides, it
    bought the prefix bounds of every quantity before the lower bounds of pulses and INRs, and
    held out, medical recall fell 0.785 → 0.773 on a split at the same false alarms.)"""
    return (SLIP, SCALE_SLIP) if key is not None and key.unit in SCALE_UNITS else (SLIP,)


# A bound's false alarms in unseen documents where too few cells say how tails move: half a
# false alarm, what "none of n values fell outside" predicts for as many values again (the
# Jeffreys estimate (0 + ½) / (n + 1) per value)
FLAT_TAIL = 0.5


@dataclass(frozen=True)
class RangeOption:
    bounds: Bounds
    rejected: int  # clean values outside, in the corpus
    expected: float  # clean values outside, estimated for unseen documents (cross-validated)
    power: float  # share of the values that the range accepts but rejects ten times larger or smaller
    kept_out: int  # of the values it was fitted to (`CellValues.bare`), those it rejects
    unseen: float  # clean values outside in unseen documents, all told (`_unseen`): what the budget charges
    places: int | None = None  # with a precision (`precision.capped_options`): the places its values keep to


def _fit(x: np.ndarray, low: float, high: float, margin: tuple[str, float], sides: str) -> Bounds | None:
    """Bounds beyond the tails quantile(low) and quantile(1 − high): `margin` ("factor", f)
    gives [lo / f, hi × f], ("width", w) [lo − w·s, hi + w·s] with s = q95 − q05, ("years", y)
    [lo − y, hi + y]; `sides`
    keeps both, the "low" or the "high" one. Rounded outwards as `heatc lower` rounds. None
    where the lower bound kept would not be above 0 (that range is the one with the side open)."""
    lo, hi, q05, q95 = (float(q) for q in np.quantile(x, [low, 1.0 - high, 0.05, 0.95]))
    kind, m = margin
    step = {"factor": 0.0, "width": m * (q95 - q05), "years": m}[kind]
    a = lo / m if kind == "factor" else lo - step
    b = hi * m if kind == "factor" else hi + step
    if sides != "high" and a <= 0:
        return None
    return (round_out(a, False) if sides != "high" else None), (round_out(b, True) if sides != "low" else None)


def slips_noticed(bounds: Bounds, values, factors: tuple[float, ...] = (SLIP,)) -> np.ndarray:
    """Per value (rows) and slip (columns, in pairs: each of the `factors` larger, then smaller;
    where the values are years, `is_years`, a century later, then earlier): whether a rule with
    these bounds accepts the value and would reject it slipped."""
    lo, hi = _closed(bounds)
    a = np.asarray(values, dtype=np.float64)
    inside = (a >= lo) & (a <= hi)
    moves = [m for f in factors for m in (a * f, a / f)]
    if len(a) and is_years(a):
        moves += [a + CENTURY, a - CENTURY]
    return np.stack([inside & ((m < lo) | (m > hi)) for m in moves], axis=1)


def slip_power(bounds: Bounds, values, factors: tuple[float, ...] = (SLIP,)) -> float:
    """The share of `values` a rule with these bounds accepts and would reject if it were
    written ten times larger or ten times smaller (a slipped decimal point, a wrong unit),
    the two directions weighted alike — averaged over the slip `factors` (`slips`). Where
    the values are years (`is_years`), a year a century off (2019 written 2119 or 1919) is
    one more kind of slip, weighted as each factor is (`slips_noticed`)."""
    if not len(np.asarray(values)):
        return 0.0
    shares = slips_noticed(bounds, values, factors).mean(axis=0)
    pairs = len(shares) // 2
    return sum(float((shares[2 * k] + shares[2 * k + 1]) / 2) for k in range(pairs)) / pairs


YEAR_MARGINS = (10.0, 25.0, 50.0)  # the margins, in years, of a range of years beyond its tails
CENTURY = 100.0  # a year's slip: the century written wrong ("2119", "1919" for 2019)
YEARS = (1900.0, 2100.0)  # what a year in today's documents reads
YEAR_SHARE = 0.8  # of a cell's positive values, at least, for them to be years


def is_years(values) -> bool:
    """Whether a cell's values are years: whole numbers in `YEARS`, `YEAR_SHARE` of those that
    are not 0 at least (a date that names no year reads 0)."""
    a = np.asarray(values, dtype=np.float64)
    a = a[a != 0]
    if not len(a):
        return False
    years = (a >= YEARS[0]) & (a <= YEARS[1]) & (a == np.floor(a))
    return float(years.mean()) >= YEAR_SHARE


FOLDS = 5  # documents are split this many ways to estimate a range's false alarms out of sample


def fitted_values(key: CellKey, cv: CellValues) -> CellValues:
    """The values a cell's range is fitted to: those written without a unit for a keyword cell
    without one (`CellValues.bare`); for a date cell, the dates that name a year (0 stands
    for none)."""
    fit = cv.bare()
    if key.value != "date":
        return fit
    out = CellValues(copy_of=fit.copy_of)
    for d, vs in fit.per_document.items():
        out.per_document[d].extend(v for v in vs if v > 0)
        out.values.extend(v for v in vs if v > 0)
    return out


def log_spread(values) -> float:
    """The decades the central 90 % of the positive values without far outliers (`inliers`)
    span, q05 to q95, at least `SPREAD_FLOOR`: how widely a cell's values vary, the scale
    its tails move on ("hemoglobin A1c" gives hemoglobin stray 1s that say nothing of it)."""
    a = np.asarray([v for v in values if v > 0], dtype=np.float64)
    a = inliers(a.tolist()) if len(a) else a
    if len(a) == 0:
        return SPREAD_FLOOR
    q05, q95 = np.quantile(a, [0.05, 0.95])
    return max(float(np.log10(q95 / q05)), SPREAD_FLOOR)


# Distances beyond a cell's extreme value, in its `log_spread`s, at which the pooled unseen
# tail (`TailMargin.unseen`) is measured; between them it is interpolated, past the last flat
TAIL_GRID = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
MIN_TAIL_CELLS = 10  # cells whose folds the pooled tail averages, at least; with fewer, `FLAT_TAIL`


@dataclass(frozen=True)
class TailMargin:
    """How far beyond the clean tail a bound must sit for the tails of documents not seen
    (`tail_margin`): `excursion` is how far a fold's tail goes past the other folds' tail,
    in multiples of its cell's `log_spread`; `ceiling` the factor that covers every cell
    alike (the measure before it was scaled by spread). `upper` and `lower`: per distance
    of `TAIL_GRID`, the values per cell that a fold writes beyond the other folds' extreme
    moved out by that distance, summed over the folds, averaged over the cells (`unseen`);
    empty where too few cells were measured."""

    excursion: float
    ceiling: float
    upper: tuple[float, ...] = ()
    lower: tuple[float, ...] = ()

    def factor(self, values) -> float:
        """The margin factor of a cell with these values: its spread times the excursion,
        in log space, at least 1.5 and at most the ceiling. Pulse rates spread over a
        quarter of a decade and doses over two; one factor for both puts a pulse's lower
        bound below any pulse written ten times too small."""
        return min(max(1.5, 10 ** (self.excursion * log_spread(values))), self.ceiling)

    def unseen(self, bounds: Bounds, values, spread: float | None = None) -> float | None:
        """The false alarms a range with these bounds can be expected to raise in documents
        not seen, as many as the corpus's, beyond those its own values show: for each bound,
        the pooled tail (`upper`, `lower`) at the bound's distance from the nearest value it
        accepts, in the cell's spreads. A cell's own cross-validation says little of a tail
        its documents happen not to show (half of MTSamples writes respirations of 12 to 35,
        the other half newborns' 48 to 68), while every cell's folds together say how
        far past the extreme seen the next documents' values go: a bound just past a cell's
        largest value is priced as such bounds turned out for all cells, and a bound half
        way to the slips it exists to catch costs less. None without curves. `spread`: the
        values' `log_spread`, where the caller prices many ranges of one cell."""
        lo, hi = bounds
        if not self.upper:
            return None
        a = np.asarray(values, dtype=np.float64)
        closed_lo, closed_hi = _closed(bounds)
        inside = a[(a >= closed_lo) & (a <= closed_hi)]
        spread = log_spread(a.tolist()) if spread is None else spread
        out = 0.0
        for bound, curve, upper in ((hi, self.upper, True), (lo, self.lower, False)):
            if bound is None:
                continue
            edge = (inside.max() if upper else inside.min()) if len(inside) else bound
            if bound <= 0 or edge <= 0:
                distance = 0.0
            else:
                distance = max(float(np.log10(bound / edge if upper else edge / bound)), 0.0) / spread
            out += float(np.interp(distance, TAIL_GRID, curve))
        return out


def tail_margin(cells: Iterable[tuple[CellKey, CellValues]], quantile: float = TAIL_QUANTILE) -> TailMargin:
    """How far beyond the clean tail a bound must sit for the tails of documents not seen:
    over every cell and every fifth of its documents, the factors by which that fifth's
    smallest value lies below the other four fifths' smallest and its largest above their
    largest. `ceiling` is the `quantile` of those factors (at least 1.5): in half of
    MTSamples one fifth in nine goes past the others' tail, and the 99th percentile is
    about 11 — dominated by doses and sizes, whose values span decades. `excursion` is the
    `quantile` of the same factors in decades divided by their cell's `log_spread`, so that
    each cell's margin follows how widely its own values vary (`TailMargin.factor`). The
    same folds give the pooled tails of `TailMargin.unseen`: how many of a fifth's values lie
    past the other fifths' extreme moved out by each distance of `TAIL_GRID` (cells of years
    apart: their bounds are priced flat)."""
    factors, scaled = [], []
    grid = np.asarray(TAIL_GRID)
    upper, lower = np.zeros(len(grid)), np.zeros(len(grid))
    n_cells = 0
    for key, cv in cells:
        fit = fitted_values(key, cv)
        spread = log_spread(fit.values)
        parts: list[list[float]] = [[] for _ in range(FOLDS)]
        for d, vs in fit.per_document.items():
            parts[fit.group(d) % FOLDS].extend(v for v in vs if v > 0)
        measured, years = False, is_years(fit.values)  # years are priced flat (`_unseen`)
        moved = 10 ** (grid * spread)  # each distance of the grid, as a factor
        for i in range(FOLDS):
            rest = [v for j, p in enumerate(parts) if j != i for v in p]
            if parts[i] and len(rest) >= 5:
                pair = [min(rest) / min(parts[i]), max(parts[i]) / max(rest)]
                factors += pair
                scaled += [float(np.log10(f)) / spread for f in pair]
                if years:
                    continue
                part = np.asarray(parts[i])
                upper += (part[None, :] > max(rest) * moved[:, None]).sum(axis=1)
                lower += (part[None, :] < min(rest) / moved[:, None]).sum(axis=1)
                measured = True
        n_cells += measured
    if not factors:
        return TailMargin(math.inf, 1.5)
    ceiling = max(1.5, float(np.quantile(factors, quantile)))
    curves = (
        (tuple(float(x) for x in upper / n_cells), tuple(float(x) for x in lower / n_cells))
        if n_cells >= MIN_TAIL_CELLS
        else ((), ())
    )
    return TailMargin(max(0.0, float(np.quantile(scaled, quantile))), ceiling, *curves)


def range_options(
    cv: CellValues,
    key: CellKey | None = None,
    margin: float = 1.5,
    min_fold_values: int = MIN_FOLD_VALUES,
    tails: TailMargin | None = None,
) -> list[RangeOption]:
    """Candidate ranges: bounds beyond the clean tails (quantile levels `RANGE_LEVELS`) by a
    margin (`RANGE_FACTORS` × `margin`, the `tail_margin`, in log space; `RANGE_WIDTHS` in
    widths), with both sides or one left open. Each is costed by its rejections in the corpus and by a cross-validated
    estimate for unseen documents: fitted on the values of four fifths of the documents and
    counted on the other fifth's, for each fifth — the narrower a range, the more its
    in-corpus count flatters; the estimate is what the heatmap records as the rule's
    false-alarm rate. A keyword cell without a unit is fitted to its values written without
    one (`fitted_values`) and costed on all of them. No options where a fold's range would be
    fitted to fewer than `min_fold_values` values. A percentage cell also gets each option
    with its upper bound at 100 % (`PERCENT_WHOLE`), its clean values past it counted.
    `tails` prices each option's unseen tail (`TailMargin.unseen`; without it `FLAT_TAIL` per bound)."""
    fit = cv.bare() if key is None else fitted_values(key, cv)
    x = np.asarray(fit.values, dtype=np.float64)
    every = np.asarray(cv.values, dtype=np.float64)
    parts: list[list[float]] = [[] for _ in range(FOLDS)]
    for d, vs in fit.per_document.items():
        parts[fit.group(d) % FOLDS].extend(vs)
    counted: list[list[float]] = [[] for _ in range(FOLDS)]
    for d, vs in cv.per_document.items():
        counted[cv.group(d) % FOLDS].extend(vs)
    held = [np.asarray(p, dtype=np.float64) for p in counted]
    fitted = [np.asarray([v for j, p in enumerate(parts) if j != i for v in p], dtype=np.float64) for i in range(FOLDS)]
    if len(x) == 0 or min(len(f) for f in fitted) < min_fold_values:
        return []
    margins = [("factor", f * margin) for f in RANGE_FACTORS]
    # a bound of years sits a decade or more past the years seen: a document written later names
    # later years (and a width of values "FY18" stretches to 2,000 years is no margin)
    years = is_years(x)
    margins += [("years", y) for y in YEAR_MARGINS] if years else [("width", w) for w in RANGE_WIDTHS]
    # how every option is priced past its bounds (`_unseen`): years flat; the spread once per cell
    priced, spread = (None if years else tails), log_spread(x.tolist())
    shapes = [(low, high, "both") for low in RANGE_LEVELS for high in RANGE_LEVELS]
    shapes += [(low, 0.0, "low") for low in RANGE_LEVELS] + [(0.0, high, "high") for high in RANGE_LEVELS]
    if key is not None and key.value == "date":
        # a date that names no year reads 0 ("the years ended December 31"), which any lower
        # bound rejects; what a date cell is for is a year too late ("2119")
        shapes = [shape for shape in shapes if shape[2] == "high"]
    # a percentage is mostly a share: 100 % bounds it, as a prior rather than a fit ("a margin
    # of 38.2%" written 382 % is impossible, whatever the tail of the margins seen); the clean
    # values past the whole ("increased 180%") are what the prior costs, counted as they fall
    whole = key is not None and key.value == "percent"
    over = int((every > PERCENT_WHOLE).sum()) if whole else 0
    out, seen = [], set()
    prefixed = key is not None and bool(key.dimension)
    for low, high, sides in shapes:
        for margin in margins:
            fitted_bounds = _fit(x, low, high, margin, sides)
            if fitted_bounds is None:
                continue
            # (bounds, how each fold's bounds follow from the fold's fitted ones, capped at the whole)
            variants = [(fitted_bounds, None, False)]
            if whole and (fitted_bounds[1] is None or fitted_bounds[1] > PERCENT_WHOLE):
                variants.append((_capped(fitted_bounds), _capped, True))
            if prefixed and sides != "both":
                # a quantity's side left open, closed where a unit a prefix off lands (`PREFIX_MARGIN`)
                variants.append((_prefixed(fitted_bounds, x), _prefixed, False))
            variants = [v for v in variants if v[0] is not None and v[0] not in seen]
            if not variants:  # (the folds are fitted only for a range not seen yet)
                continue
            fitted_folds = [_fit(f, low, high, margin, sides) for f in fitted]
            if any(b is None for b in fitted_folds):
                continue
            for bounds, follow, capped in variants:
                if follow is None:
                    folds = fitted_folds
                elif follow is _prefixed:
                    folds = [_prefixed(b, f) for b, f in zip(fitted_folds, fitted, strict=True)]
                else:
                    folds = [follow(b) for b in fitted_folds]
                if any(b is None for b in folds):
                    continue
                seen.add(bounds)
                expected = sum(count_outside(b, h) for b, h in zip(folds, held, strict=True))
                out.append(
                    RangeOption(
                        bounds,
                        count_outside(bounds, every),
                        float(expected),
                        slip_power(bounds, x, slips(key)),
                        count_outside(bounds, x),
                        _unseen(bounds, x, expected, priced, spread, whole=capped, over=over),
                    )
                )
    return out


def _unseen(
    bounds: Bounds,
    fitted: np.ndarray,
    expected: float,
    tails: TailMargin | None,
    spread: float | None = None,
    whole: bool = False,
    over: int = 0,
) -> float:
    """A range's false alarms in unseen documents: the pooled tail at its bounds
    (`TailMargin.unseen`); where too few cells measured one, its own cross-validated count
    and `FLAT_TAIL` per bound besides (the least of many noisy estimates is an optimistic one).
    An upper bound at the `whole` (100 %) is a prior, not a fit: no tail moves a share past
    it, and it costs `FLAT_TAIL` wherever its values lie, and the `over` clean values past
    it besides (as many again in unseen documents as in the corpus). Years are priced flat too (the
    caller gives no `tails`): their bounds sit decades, not spreads, past the years seen
    (`YEAR_MARGINS`), and a year's tail moves with when a document was written, not by a
    factor. `spread`: the fitted values' `log_spread`."""
    pooled = None if tails is None else tails.unseen((bounds[0], None) if whole else bounds, fitted, spread)
    if pooled is None:
        return expected + FLAT_TAIL * n_bounds(bounds)
    return pooled + (FLAT_TAIL + over if whole else 0.0)


def restated_option(cv: CellValues, key: CellKey | None = None) -> RangeOption | None:
    """The one range of a number word restated in digits: exactly the number its values
    restate, their most common one ("thirty (30)": [30, 30]; a contract's "one hundred and
    eighty (180)" makes eighty's [180, 180]). A margin would only let "thirty (45) days" —
    another term — pass. Cross-validated as `range_options` is: each fold's number from the
    other folds' values. None without values."""
    every = np.asarray(cv.values, dtype=np.float64)
    if not len(every):
        return None

    def mode(values) -> float:
        kinds, counts = np.unique(np.asarray(values, dtype=np.float64), return_counts=True)
        return float(kinds[np.argmax(counts)])

    parts: list[list[float]] = [[] for _ in range(FOLDS)]
    for d, vs in cv.per_document.items():
        parts[cv.group(d) % FOLDS].extend(vs)
    expected = 0
    for i in range(FOLDS):
        rest = [v for j, p in enumerate(parts) if j != i for v in p]
        if rest and parts[i]:
            m = mode(rest)
            expected += count_outside((m, m), parts[i])
    m = mode(every)
    bounds = (m, m)
    # no tail to price: its false alarms in unseen documents are the other numbers restated,
    # which the folds count, and half a false alarm per bound besides (`FLAT_TAIL`)
    return RangeOption(
        bounds, count_outside(bounds, every), float(expected), slip_power(bounds, every, slips(key)),
        count_outside(bounds, every), _unseen(bounds, every, float(expected), None),
    )  # fmt: skip


def _prefixed(bounds: Bounds, values) -> Bounds | None:
    """The bounds with a side left open closed `PREFIX_MARGIN` past the values' extreme on
    that side (their smallest positive one below): a quantity's range that notices the same
    value written with a unit a prefix off (mg for g or mcg, mL for L), a thousand times off,
    and passes every value within a factor of 30. None without a positive value."""
    a = np.asarray(values, dtype=np.float64)
    a = a[a > 0]
    if not len(a):
        return None
    lo, hi = bounds
    lo = round_out(float(a.min()) / PREFIX_MARGIN, False) if lo is None else lo
    hi = round_out(float(a.max()) * PREFIX_MARGIN, True) if hi is None else hi
    return lo, hi


def _capped(bounds: Bounds) -> Bounds:
    """The bounds with the upper one at most `PERCENT_WHOLE`."""
    lo, hi = bounds
    return lo, PERCENT_WHOLE if hi is None else min(hi, PERCENT_WHOLE)


def log_width(bounds: Bounds) -> float:
    """A range's width in decades, an open side reaching 10^-9 or 10^12 (so that of two ranges
    open on the same side the one with the nearer bound is narrower)."""
    lo, hi = bounds
    lo = 1e-9 if lo is None or lo <= 0 else lo
    hi = 1e12 if hi is None else hi
    return math.log10(max(hi, lo) / lo)
